"""Config loading: defaults, overrides, and errors that name the key and the reason."""

import pytest
import yaml

from ptyacc.config import Config, config_reference, load_config, with_values
from ptyacc.config.loading import portable
from ptyacc.errors import ConfigError


def write(tmp_path, text: str):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def test_defaults_are_valid_and_round_trip_through_yaml(tmp_path):
    """The YAML that a config prints loads back to an equal config."""
    config = load_config(None)
    again = load_config(write(tmp_path, config.to_yaml()))
    assert again.to_dict() == config.to_dict()


def test_values_and_nested_sections_are_read(tmp_path):
    """Keys in nested sections end up in the dataclasses, ints widened to floats."""
    config = load_config(write(tmp_path, """
data: {path: d.h5, scan_shape: [4, 5], transform: {flip_y: true}}
experiment: {energy_eV: 300000, aberrations: {C30: 1.0e4, C12a: 5}, positions: {key: pos}}
optim: {lr: {probe: 0.5}, start: {positions: 3}}
"""))
    assert config.data.scan_shape == [4, 5] and config.data.transform.flip_y is True
    assert config.experiment.energy_eV == 300000.0 and isinstance(config.experiment.energy_eV, float)
    assert config.experiment.aberrations == {"C30": 1e4, "C12a": 5.0}
    assert config.experiment.positions.key == "pos" and config.experiment.positions.path is None
    assert config.optim.lr.probe == 0.5 and config.optim.lr.object == Config().optim.lr.object
    assert config.optim.start.positions == 3
    assert config.resolve_input("d.h5") == tmp_path / "d.h5"


def test_set_overrides_parse_yaml_values():
    """--set values are YAML: numbers, lists, null; sections are created as needed."""
    config = load_config(None, ["optim.iterations=5", "model.slices=4", "experiment.aberrations.C30=2e3",
                                "optim.start.probe=null", "data.simulate.scan_shape=[3, 2]"])
    assert config.optim.iterations == 5 and config.model.slices == 4
    assert config.experiment.aberrations == {"C30": 2000.0}
    assert config.optim.start.probe is None
    assert config.data.simulate.scan_shape == [3, 2]


def test_a_bare_off_is_the_choice_off_not_yamls_false(tmp_path):
    """YAML 1.1 reads an unquoted ``off`` as false; a key whose choices include "off" takes it as that
    choice, in a file and in --set; true is still refused."""
    config = load_config(write(tmp_path, "data: {path: d.h5, bad_pixels: off, transform: {descan: off}}"))
    assert config.data.bad_pixels == "off" and config.data.transform.descan == "off"
    assert load_config(None, ["data.path=d.h5", "data.transform.descan=off"]).data.transform.descan == "off"
    with pytest.raises(ConfigError, match="data.transform.descan: must be one of off, auto, got True"):
        load_config(None, ["data.path=d.h5", "data.transform.descan=on"])


@pytest.mark.parametrize("text, expected", [
    ("optim: {iteratons: 5}", "optim.iteratons: unknown key (did you mean 'iterations'?)"),
    ("bogus: {}", "bogus: unknown key"),
    ("optim: {lr: {probe: -1}}", "optim.lr.probe: must be >= 0, got -1"),
    ("optim: {iterations: five}", "optim.iterations: expected an integer, got 'five'"),
    ("optim: {iterations: 2.5}", "optim.iterations: expected an integer, got 2.5"),
    ("optim: {loss: gauss}", "optim.loss: must be one of auto, amplitude, poisson, got 'gauss'"),
    ("model: {slices: 0}", "model.slices: must be >= 1, got 0"),
    ("experiment: {energy_eV: -3}", "experiment.energy_eV: must be > 0, got -3.0"),
    ("experiment: {aberrations: {C31: 1}}", "experiment.aberrations.C31: unknown aberration"),
    ("experiment: {defocus_A: 1, aberrations: {C10: 1}}", "experiment.defocus_A: give defocus_A or aberrations.C10"),
    ("data: {path: a.h5, simulate: {}}", "data: give exactly one of `path`"),
    ("data: {path: a.h5, scan_shape: [3]}", "data.scan_shape: must be two positive integers"),
    ("data: {path: 3}", "data.path: expected a string, got 3"),
    ("runtime: {device: tpu}", "runtime.device: must be one of auto, cpu, cuda, mps, got 'tpu'"),
    ("runtime: {progress: 1}", "runtime.progress: expected true or false, got 1"),
    ("optim: 5", "optim: expected a mapping of keys, got int 5"),
    ("experiment: {positions: spiral}", "experiment.positions: must be one of raster, got 'spiral'"),
])
def test_bad_configs_name_the_key_and_reason(tmp_path, text, expected):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    assert expected in str(info.value)


def test_bad_override_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="expected key.path=value"):
        load_config(None, ["optim.iterations"])
    with pytest.raises(ConfigError, match="optim.iterations: expected an integer"):
        load_config(None, ["optim.iterations=many"])
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "optim: {iterations: [1"))


def test_reference_lists_every_key():
    """The generated reference names every leaf key of the schema with its default."""
    text = config_reference()
    flat = _leaf_keys(load_config(None).to_dict())
    missing = [key for key in flat if f"`{key}`" not in text]
    assert not missing
    assert "| `optim.iterations` | int or auto | `20` |" in text


def _leaf_keys(tree, prefix=""):
    keys = []
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key != "aberrations":
            keys += _leaf_keys(value, path + ".")
        else:
            keys.append(path)
    return keys


def test_shipped_configs_are_valid():
    from pathlib import Path

    configs = sorted((Path(__file__).parents[1] / "configs").glob("*.yaml"))
    assert configs
    for path in configs:
        load_config(path)
        yaml.safe_load(path.read_text())


@pytest.mark.parametrize("key", ["optim.lr.object", "experiment.energy_eV", "model.slice_thickness_A",
                                 "optim.regularize.lateral_blur_px", "optim.regularize.tv_phase_smoothing"])
def test_a_number_that_is_not_finite_is_refused_naming_its_key(tmp_path, key):
    """inf and NaN mean nothing for any setting (an infinite blur would never finish building its
    taps): refused from --set and from a YAML file alike."""
    for text in ("inf", "-inf", "nan"):
        with pytest.raises(ConfigError, match=rf"{key}: expected a finite number"):
            load_config(None, [f"{key}={text}"])
    section, name = key.rsplit(".", 1)
    nested = {name: float("inf")}
    for part in reversed(section.split(".")):
        nested = {part: nested}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(nested))
    with pytest.raises(ConfigError, match=rf"{key}: expected a finite number"):
        load_config(path)


def test_a_config_with_values_is_validated_and_reads_what_its_source_read(tmp_path):
    """``with_values`` (tune's trials and the orientation trials): dotted keys set and checked as a loaded config
    is; a relative path it does not make absolute still resolves against the source's folder."""
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "c.yaml"
    path.write_text(yaml.safe_dump({"data": {"path": "d.h5"}, "model": {"probe_init": {"path": "probe.h5"}}}))
    source = load_config(path)
    made = with_values(source, {"optim.iterations": 3, "data.transform.flip_y": True})
    assert made.optim.iterations == 3 and made.data.transform.flip_y and not source.data.transform.flip_y
    assert made.resolve_input(made.model.probe_init.path) == source.resolve_input(source.model.probe_init.path)
    assert made.resolve_input("other.h5") == source.resolve_input("other.h5")
    with pytest.raises(ConfigError, match="optim.iterations"):
        with_values(source, {"optim.iterations": -2})


def test_a_portable_config_keeps_each_scans_files_wherever_it_is_written(tmp_path):
    """``portable`` (tune's best.yaml and trial configs): every scan's own data, flat field and positions file is made
    absolute as the top level's are, so that the config written to another folder reads the same files."""
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "c.yaml"
    path.write_text(yaml.safe_dump({"data": {"path": "a.h5"}, "scans": [
        {"data": {"path": "a.h5"}},
        {"data": {"path": "b.h5", "flat_field": "gain.h5"}, "experiment": {"positions": {"path": "p.h5"}}}]}))
    raw = portable(load_config(path))
    folder = (tmp_path / "sub").resolve()
    assert [scan["data"]["path"] for scan in raw["scans"]] == [str(folder / "a.h5"), str(folder / "b.h5")]
    assert raw["scans"][1]["data"]["flat_field"] == str(folder / "gain.h5")
    assert raw["scans"][1]["experiment"]["positions"]["path"] == str(folder / "p.h5")
    (tmp_path / "elsewhere").mkdir()
    moved = tmp_path / "elsewhere" / "best.yaml"
    moved.write_text(yaml.safe_dump(raw))
    again = load_config(moved)
    assert again.resolve_input(again.scans[1].data["path"]) == folder / "b.h5"
