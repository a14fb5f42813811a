"""The ptychography model: its quantities (the object, the probe and what else is refined, each
``ptyacc/quantities/``'s), the scan, and forward(indices) -> intensities.

Complex quantities are stored as real tensors ((..., 2) real/imaginary pairs) so that no
complex tensor ever reaches a collective; forward views them as complex without a copy.
"""

from __future__ import annotations

from operator import attrgetter

import numpy as np
import torch
from torch import nn

from ptyacc.physics import (
    Detector,
    detected_intensities,
    intensity_loss_terms,
    ptycho_loss,
    shift_ramp,
    shift_ramps_1d,
)
from ptyacc.physics.geometry import ObjectGeometry


def _view(quantity: str, attribute: str, doc: str) -> property:
    """A read-only property of a ``PtychoModel``: ``attribute`` of its quantity named ``quantity``, or None
    where the run has no such quantity or the quantity holds no such tensor (the scan affine where
    ``model.scan_affine: rotation`` refines one angle)."""
    return property(lambda model: getattr(model.quantities[quantity], attribute, None) if quantity in model.quantities
                    else None, doc=doc)


class PtychoModel(nn.Module):
    """Object, probe and scan of one reconstruction, and its refined quantities.

    Parameters
    - quantities: the refined quantities in modules of their own (``ptyacc/quantities/``), by name: the
      object and the probe, given at construction, then those given after it (``attach_quantities``:
      position offsets and the scan affine, the fitted background and intensity weights, a varying
      probe, the probes of several scans, the detector's blur, ...), applied in that order; the
      forward calls only the hooks a quantity's class has (``quantities_with``). Read-only views:
      ``object`` (object_modes, slices, Ny, Nx, 2) float32 real and imaginary parts of the transmission,
      ``probe`` (probe_modes, K, K, 2) float32 divided by ``probe_scale``. ``refine_positions``: the probe centres move
      (a quantity's ``centres``, ``quantities/positions.py``), so the forward pass computes the
      windows from them instead of looking up the fixed ones.
    Buffers (constant): positions_px (N, 2), propagator (K, K, 2), and the
    detector's near-field propagator (K, K, 2) and bad-pixel mask (K, K) when used.
    ``propagation`` (``quantities/slices.py``'s ``SlicePropagation``, multislice with a tilt or a refined slice thickness):
    the propagator made at every forward pass from the tilt and the thickness, instead of the
    constant ``propagator``.

    The object's ``region`` (y0, y1, x0, x1): the part of the object this process holds (``runtime.shard_object``,
    ``ptyacc/reconstruction/tiles.py``); the object parameter is then (object_modes, slices, y1 - y0, x1 - x0, 2)
    and the buffer object_origin () = (y0, x0) (not saved: it follows from the run's tiling).
    Window corners stay in pixels of the whole object and are shifted by the origin to index it.
    """

    def __init__(self, obj: nn.Module, probe: nn.Module, geometry: ObjectGeometry,
                 propagator: torch.Tensor | None = None, refine_positions: bool = False,
                 detector: Detector | None = None, propagation: nn.Module | None = None,
                 movable_scan: bool = False) -> None:
        """``obj``, ``probe``: the object's and the probe's quantities (``quantities/object.py``,
        ``quantities/probe.py``), the first two of ``quantities``."""
        super().__init__()
        _, slices, _, _, _ = obj.transmission.shape
        k = probe.modes.shape[-2]
        self.window = k
        self.object_shape = geometry.shape
        positions_px = torch.as_tensor(np.asarray(geometry.positions_px), dtype=torch.float32)
        # what ``move_scan`` (allowed when ``movable_scan``) has added to every position (px): the
        # object's shift in the data's frame; saved in checkpoints only when it can change
        self.register_buffer("scan_shift_px", torch.zeros(2), persistent=movable_scan)
        # the buffers ``move_scan`` changes: a rollback (hooks.NanGuard) restores them with the parameters
        self.moving_buffers = ("positions_px", "scan_shift_px", "fixed_corners", "fixed_fractions") if movable_scan else ()
        corners, fractions = self._window_corners(positions_px)
        # With fixed positions on the pixel grid the probe never needs shifting: skip 2 FFTs.
        self.needs_shift = refine_positions or movable_scan or bool(fractions.abs().max() > 1e-4)
        # Fixed positions: window corners and sub-pixel rests are computed once, not every step; the
        # shift factors (2 K complex numbers, 1 KiB per position at K = 64) from the rests per step
        y0, _, x0, _ = obj.region
        self.register_buffer("object_origin", torch.tensor([y0, x0]), persistent=False)
        self.holds_from_corner = (y0, x0) == (0, 0)  # corners need no shifting: one operator fewer per step
        self.register_buffer("positions_px", positions_px)
        self.refine_positions = refine_positions
        if slices > 1 and propagator is None:
            raise ValueError("a multislice model needs a propagator")
        prop = torch.view_as_real(propagator.to(torch.complex64)) if propagator is not None else torch.zeros(k, k, 2)
        self.register_buffer("propagator", prop.contiguous())
        self.register_buffer("fixed_corners", corners)
        self.register_buffer("fixed_fractions", fractions.contiguous())
        self._register_load_state_dict_pre_hook(self._rests_from_old_state)
        detector = detector or Detector()
        self.near_field = detector.propagator is not None
        # a scan that only recentring moves keeps one sub-pixel rest for all positions (on the
        # pixel grid at first, as most scans): the probe is then shifted once per step, not per position
        self.uniform_shift = movable_scan and not refine_positions and not self.near_field and _uniform(fractions)
        near = detector.propagator if self.near_field else torch.zeros(k, k, dtype=torch.complex64)
        self.register_buffer("detector_propagator", torch.view_as_real(near.to(torch.complex64)).contiguous())
        self.has_mask = detector.mask is not None
        self.register_buffer("detector_mask", (detector.mask if self.has_mask else torch.ones(k, k)).float())
        self.quantities = nn.ModuleDict({"object": obj, "probe": probe})  # ptyacc/quantities/registry.py
        self._hooks_of: tuple[tuple[nn.Module, ...], dict[str, list[nn.Module]]] = ((), {})  # ``quantities_with``
        self._register_load_state_dict_pre_hook(_renamed_from_old_state, with_module=True)
        self.propagation = propagation
        self.loss_terms = intensity_loss_terms  # or a compiled equivalent (runtime.compile)
        self.field_terms = None  # or ``CompiledTerms.field`` (runtime.compile)
        # the amplitude loss's floor in the patterns' units (``build_model``'s ``amplitude_floor``), or None: the
        # bare EPS (``chain.loss_floor``)
        self.amplitude_floor: float | None = None

    # ------------------------------------------------------------------ forward
    def forward(self, indices: torch.Tensor, measured: torch.Tensor | None = None,
                loss: str = "amplitude") -> torch.Tensor:
        """Predicted intensities (B, K, K), unshifted layout, for positions ``indices`` (B,);
        or, given the ``measured`` intensities (B, K, K), the summed ``loss`` against them
        (value and gradient computed together by ``ptycho_loss``)."""
        indices = indices.reshape(-1)
        hooked = self.quantities_with()
        probe = self.complex_probe()
        for quantity in hooked["probes"]:  # each may make a probe per position (B, P, K, K)
            probe = quantity.probes(probe, indices, self.probe_scale)
        obj = self.complex_object()
        detector = self.detector(hooked["detection"])
        propagator = self.slice_propagator(indices) if obj.shape[1] > 1 else None
        if self.refine_positions:
            top_left, fraction = self._window_corners(self._centres(indices, hooked["centres"]))
            ramps = shift_ramp(fraction, self.window)
        else:
            top_left = self.fixed_corners[indices]
            ramps = None
            if self.uniform_shift:  # the same ramp for every position: the probe shifted once
                probe = torch.fft.ifft2(torch.fft.fft2(probe) * self._uniform_ramp())
            elif self.needs_shift:
                # this step's factors only: kept for every position they would take 1 KiB each (K = 64), memory
                # that grows with the scan where the patterns themselves stay on disk (tests/test_hold.py)
                ramp_y, ramp_x = shift_ramps_1d(self.fixed_fractions[indices], self.window)
                ramps = torch.bmm(ramp_y[:, :, None], ramp_x[:, None, :])  # (B, K, K)
        if not self.holds_from_corner:
            top_left = top_left - self.object_origin  # corners in the held part of the object
        weights = background = exit_ramps = None
        for quantity in hooked["intensity_factor"]:  # each may scale the patterns (B,)
            if (factor := quantity.intensity_factor(indices)) is not None:
                weights = factor if weights is None else weights * factor
        for quantity in hooked["added_background"]:  # and add to them (K, K)
            if (added := quantity.added_background()) is not None:
                background = added if background is None else background + added
        for quantity in hooked["exit_ramp"]:  # each may multiply the exit waves (B, K, K): the descan's ramp
            if (ramp := quantity.exit_ramp(indices)) is not None:
                exit_ramps = ramp if exit_ramps is None else exit_ramps * ramp
        if measured is not None:
            floor_share = None
            for quantity in hooked["floor_share"]:  # several scans: each pattern's share of the loss's floor (B,)
                floor_share = quantity.floor_share(indices)
            return ptycho_loss(probe, obj, top_left, ramps, propagator, measured, loss, detector=detector,
                               weights=weights, background=background, terms=self.loss_terms, exit_ramps=exit_ramps,
                               field_terms=self.field_terms, floor_share=floor_share,
                               floor=self.amplitude_floor if loss == "amplitude" else None)
        return detected_intensities(probe, obj, top_left, ramps, propagator, detector, weights, background, exit_ramps)

    _ramp_made_from: tuple | None = None  # what ``_uniform_ramp`` made its ramp from
    _ramp: torch.Tensor | None = None

    def _uniform_ramp(self) -> torch.Tensor:
        """The shift factor (1, K, K) of the sub-pixel rest that all fixed positions share (``uniform_shift``).
        Made when the rests change (``move_scan``, a checkpoint or a rollback writes them in place), not at
        every step: the same numbers."""
        fractions = self.fixed_fractions
        key = (fractions.data_ptr(), fractions._version)
        if self._ramp_made_from != key:
            ramp_y, ramp_x = shift_ramps_1d(fractions[:1], self.window)
            self._ramp = torch.bmm(ramp_y[:, :, None], ramp_x[:, None, :])
            self._ramp_made_from = key
        return self._ramp

    def quantities_with(self) -> dict[str, list[nn.Module]]:
        """{hook: the quantities whose class has its own ``hook``, in their order} for every hook of a
        ``Quantity`` (``probes``, ``centres``, ..., ``saved``, ``attributes``): the forward and the saver call
        no hook that would leave its input as it is. Made anew when the quantities change."""
        held, lists = self._hooks_of
        if held != tuple(self.quantities.values()):
            held = tuple(self.quantities.values())
            lists = {hook: [quantity for quantity in held if _overrides(quantity, hook)] for hook in HOOKS}
            self._hooks_of = (held, lists)
        return lists

    def slice_propagator(self, indices: torch.Tensor) -> torch.Tensor:
        """The propagator between slices (K, K) complex64, or (B, K, K) with a tilt per position of ``indices`` (B,)."""
        if self.propagation is not None:
            return self.propagation(indices)
        return torch.view_as_complex(self.propagator)

    def detector(self, quantities: list[nn.Module] | None = None) -> Detector:
        """The detection of this model: near-field propagator and bad-pixel mask when used, and what
        its quantities do to it (the point spread, ``quantities/detector_blur.py``; ``quantities``: those
        with a ``detection``, ``quantities_with()["detection"]`` when not given)."""
        quantities = self.quantities_with()["detection"] if quantities is None else quantities
        detector = Detector(propagator=torch.view_as_complex(self.detector_propagator) if self.near_field else None,
                            mask=self.detector_mask if self.has_mask else None)
        for quantity in quantities:
            detector = quantity.detection(detector)
        return detector

    def detector_blur_px(self) -> float | None:
        """The point spread's sigma (px) now, or None for a model without blur."""
        return self.quantities["detector_blur"].sigma_px() if "detector_blur" in self.quantities else None

    def _window_corners(self, centres: torch.Tensor, scan_shift_px: torch.Tensor | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """Integer window corners (B, 2), clamped inside the object, and the sub-pixel
        remainder (B, 2) that the probe shift must supply (differentiable in the centres). The
        corners are those of the centres before ``move_scan`` (by ``scan_shift_px``, this
        model's when None): a move changes only the remainder, so the probe shift absorbs it exactly."""
        half = self.window // 2
        shift = self.scan_shift_px if scan_shift_px is None else scan_shift_px
        corner = torch.round(centres.detach() - shift - half)
        high = torch.tensor(self.object_shape, device=centres.device, dtype=centres.dtype) - self.window
        corner = torch.minimum(torch.clamp(corner, min=0), high)
        return corner.long(), centres - half - corner

    def window_corners(self, indices: torch.Tensor) -> torch.Tensor:
        """Window corners (B, 2) long of the positions ``indices`` (B,) as the forward pass puts
        them now (fixed positions: looked up, as forward does; refined ones: from the current
        positions)."""
        if not self.refine_positions:
            return self.fixed_corners[indices]
        return self._window_corners(self._centres(indices).detach())[0]

    @torch.no_grad()
    def move_scan(self, shift_px: torch.Tensor) -> None:
        """Move every probe position by ``shift_px`` (2,) (y, x) px against the object, keeping
        the precomputed windows and shift factors of fixed positions in step (``ptyacc/reconstruction/recenter.py``;
        the model must have been built with ``movable_scan``, so that it shifts the probe always)."""
        self.positions_px += shift_px
        self.scan_shift_px += shift_px
        corners, fractions = self._window_corners(self.positions_px)
        self.uniform_shift = self.uniform_shift and _uniform(fractions)
        self.fixed_corners.copy_(corners)
        self.fixed_fractions.copy_(fractions)

    def _rests_from_old_state(self, state: dict, prefix: str, *args) -> None:
        """A checkpoint written before the shift factors were made per step holds them whole
        ('fixed_ramps', (N, 2, K, 2)) instead of the sub-pixel rests they came from: the rests
        are those of its positions (called by ``load_state_dict``)."""
        ramps = state.pop(prefix + "fixed_ramps", None)
        if ramps is not None and prefix + "fixed_fractions" not in state:
            state[prefix + "fixed_fractions"] = self._window_corners(
                state[prefix + "positions_px"], state.get(prefix + "scan_shift_px", self.scan_shift_px))[1]

    def _centres(self, indices: torch.Tensor, quantities: list[nn.Module] | None = None) -> torch.Tensor:
        """(B, 2) probe centres in object pixels of the positions ``indices`` (B,): nominal, then as
        each quantity moves them (``quantities/positions.py``: the scan affine and the offsets; ``quantities``:
        those with ``centres``, ``quantities_with()["centres"]`` when not given)."""
        centres = self.positions_px[indices]
        for quantity in self.quantities_with()["centres"] if quantities is None else quantities:
            centres = quantity.centres(centres, indices, self.scan_shift_px)
        return centres

    def upgraded_state(self, state: dict) -> dict:
        """A copy of a saved state dict of this model with the names of earlier versions made today's
        (what ``load_state_dict`` does on its own; ``checkpoint.restore`` checks the names first)."""
        state = dict(state)
        _renamed_from_old_state(self, state, "")
        return state

    # ------------------------------------------------------------------ views of the state
    # read-only views of the refined quantities' tensors, None where the run has no such quantity
    background = _view("fitted", "background",
                       "The fitted background parameter (K, K), in units of the data's mean pixel count, or None.")
    intensity_weights = _view("fitted", "intensity_weights", "The fitted intensity weights (N,), or None.")
    position_offsets = _view("positions", "offsets_px", "The refined position offsets (N, 2) px, or None for fixed positions.")
    scan_affine = _view("positions", "scan_affine", "The refined scan affine M (2, 2), or None.")
    detector_blur_variance = _view("detector_blur", "variance_px2", "The variance (px^2) of the detector's point spread, "
                                   "a parameter when refined, or None without blur.")
    depth_blur = _view("object", "depth_blur", "The object's depth blur in two stages (quantities/object.py's "
                       "DepthBlurStages): its sigma now and where its first stage ended.")

    # read-only views of the object's and the probe's tensors, looked up by attribute (no function of the package runs)
    object = property(attrgetter("quantities.object.transmission"),
                      doc="The object's transmission (object_modes, slices, Ny, Nx, 2) float32 (quantities/object.py).")
    probe = property(attrgetter("quantities.probe.modes"),
                     doc="The probe modes (probe_modes, K, K, 2) float32 divided by probe_scale (quantities/probe.py).")
    probe_scale = property(attrgetter("quantities.probe.scale"),
                           doc="() float32: the probe modes' scale, the initial modes' largest amplitude.")

    def complex_probe(self) -> torch.Tensor:
        """(probe_modes, K, K) complex64, centred real-space probe modes."""
        return torch.view_as_complex(self.probe) * self.probe_scale

    def complex_object(self) -> torch.Tensor:
        """(object_modes, slices, Ny, Nx) complex64 transmission (a view of the parameter; the
        held region only under ``runtime.shard_object``)."""
        return torch.view_as_complex(self.object)

    def positions(self) -> torch.Tensor:
        """(N, 2) current probe centres in object pixels."""
        return self._centres(torch.arange(len(self.positions_px), device=self.positions_px.device))


# the model's own tensors of earlier versions that moved into quantities (``quantities.<name>.<tensor>``)
OLD_KEYS = {"object": "quantities.object.transmission",
            "probe": "quantities.probe.modes",
            "probe_scale": "quantities.probe.scale",
            "background": "quantities.fitted.background",
            "intensity_weights": "quantities.fitted.intensity_weights",
            "background_scale": "quantities.fitted.background_scale",
            "position_offsets": "quantities.positions.offsets_px",
            "scan_affine": "quantities.positions.scan_affine",
            "detector_blur_variance": "quantities.detector_blur.variance_px2"}


def _renamed_from_old_state(model: PtychoModel, state: dict, prefix: str, *args) -> None:
    """A checkpoint written when the model held the object, the probe and its scale ('object', 'probe',
    'probe_scale'), the fitted background and weights ('background', 'intensity_weights', and
    'background_scale' always), the position offsets ('position_offsets', always), the scan affine and
    the detector blur's variance itself: under the names of their
    quantities now (dropped where this model has no such quantity: the background's scale of a run
    that fits nothing, the zero offsets of fixed positions)."""
    for old, new in OLD_KEYS.items():
        if prefix + old in state:
            value = state.pop(prefix + old)
            if new.split(".")[1] in model.quantities:
                state[prefix + new] = value


# a Quantity's hooks (quantities/registry.py)
HOOKS = ("probes", "centres", "intensity_factor", "added_background", "exit_ramp", "floor_share", "detection",
         "saved", "attributes")


def _overrides(quantity: nn.Module, hook: str) -> bool:
    """Whether ``quantity``'s class, or a class between it and ``Quantity``, defines its own ``hook``
    (more than one class of its method resolution order defines it)."""
    return sum(hook in vars(cls) for cls in type(quantity).__mro__) > 1


def _uniform(fractions: torch.Tensor, tolerance_px: float = 1e-4) -> bool:
    """Whether the sub-pixel rests (N, 2) of all positions agree to ``tolerance_px`` (the
    tolerance below which a position already counts as on the pixel grid)."""
    return bool((fractions - fractions[:1]).abs().max() <= tolerance_px)


def orthogonalize_modes(modes: torch.Tensor) -> torch.Tensor:
    """Orthogonal modes (M, K, K), sorted by decreasing power, spanning the same incoherent
    state: sum_m |mode_m|^2 is unchanged. Uses the eigenvectors of the small M x M Gram matrix."""
    m = modes.shape[0]
    flat = modes.reshape(m, -1).to(torch.complex128)
    gram = flat.conj() @ flat.T  # (M, M), Hermitian
    eigenvalues, eigenvectors = torch.linalg.eigh(gram)
    order = torch.argsort(eigenvalues, descending=True)
    rotated = eigenvectors[:, order].T @ flat
    return rotated.reshape(modes.shape).to(modes.dtype)
