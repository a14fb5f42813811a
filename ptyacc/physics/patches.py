"""Stage 2 of the forward chain: the object's windows under the probe at each position."""

import torch


class Patches:
    """Windows (B, ..., size, size) of an image (..., Ny, Nx) whose pixel [0, 0] sits at
    ``top_left`` (B, 2) integer (row, column), inside the image. ``forward`` indexes a strided
    view of all windows (rows of ``size`` contiguous pixels: several times faster than a flat
    gather); ``adjoint`` scatter-adds windows back into an image, overlapping windows adding up."""

    def __init__(self, top_left: torch.Tensor, size: int) -> None:
        self.top_left = top_left
        self.size = size

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        windows = image.unfold(-2, self.size, 1).unfold(-2, self.size, 1)  # (..., Ny-size+1, Nx-size+1, size, size)
        return windows[..., self.top_left[:, 0], self.top_left[:, 1], :, :].movedim(-3, 0)

    def adjoint(self, patches: torch.Tensor, image_shape: torch.Size | tuple[int, ...]) -> torch.Tensor:
        """The image (image_shape) that is the sum of the ``patches`` (B, ..., size, size) put at their windows."""
        image = torch.zeros(image_shape, dtype=patches.dtype, device=patches.device)
        self.add_adjoint(image, patches)
        return image

    def add_adjoint(self, image: torch.Tensor, patches: torch.Tensor) -> None:
        """Add ``adjoint(patches)`` into ``image`` (..., Ny, Nx), contiguous, in place: the chunks
        of a batch accumulate into one gradient."""
        *lead, _, nx = image.shape
        offsets = torch.arange(self.size, device=patches.device)
        rows = self.top_left[:, 0:1] + offsets  # (B, size)
        cols = self.top_left[:, 1:2] + offsets
        flat_index = (rows[:, :, None] * nx + cols[:, None, :]).reshape(-1)
        image.view(*lead, -1).index_add_(-1, flat_index, patches.movedim(0, -3).reshape(*lead, -1))


def extract_patches(image: torch.Tensor, top_left: torch.Tensor, size: int) -> torch.Tensor:
    """``Patches(top_left, size).forward(image)`` for autograd: its backward is the scatter-add
    ``adjoint``, not autograd's generic backward of indexing a strided view."""
    return _ExtractPatches.apply(image, top_left, size)


class _ExtractPatches(torch.autograd.Function):
    @staticmethod
    def forward(ctx, image: torch.Tensor, top_left: torch.Tensor, size: int) -> torch.Tensor:
        ctx.save_for_backward(top_left)
        ctx.image_shape = image.shape
        ctx.size = size
        return Patches(top_left, size).forward(image)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (top_left,) = ctx.saved_tensors
        return Patches(top_left, ctx.size).adjoint(grad, ctx.image_shape), None, None
