"""Golden files: export, reload bit for bit, re-verify, tampering; the CLI; the doc's loader."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ppo_numpy
from ppo_numpy.oracle import golden
from ppo_numpy.oracle.cases import INPUT_NAMES, generate_cases
from ppo_numpy.oracle.compare import TOLERANCES
from ppo_numpy.oracle.group_cases import cases_for
from ppo_numpy.oracle.presets import PRESETS, get_preset
from ppo_numpy.programs.oracle import main

DOC = Path(__file__).resolve().parents[1] / "docs" / "oracle.md"


@pytest.fixture(scope="module")
def seed_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("golden-seed")
    golden.export(d, "seed", generate_cases(0))
    return d


@pytest.fixture(scope="module")
def trl_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("golden-trl")
    golden.export(d, get_preset("trl"), seed=0)
    return d


def test_manifest_records_what_is_needed(seed_dir):
    manifest = json.loads((seed_dir / "manifest.json").read_text())
    preset = get_preset("seed")
    assert manifest["format"] == "ppo_numpy.oracle.golden" and manifest["format_version"] == 1
    assert manifest["ppo_numpy_version"] == ppo_numpy.__version__
    assert manifest["preset"]["name"] == "seed"
    assert manifest["preset"]["defaults"] == preset.defaults
    assert manifest["preset"]["conventions"] == preset.conventions
    assert manifest["preset"]["sources"] == list(preset.sources)
    assert manifest["input_names"] == list(INPUT_NAMES)
    assert manifest["tolerances"] == {d: {"rtol": t.rtol, "atol": t.atol}
                                      for d, t in TOLERANCES.items()}
    assert manifest["per_token_outputs"] == ["advantages", "dlogp", "dvalues", "returns",
                                             "rewards"]
    entries = {e["name"]: e for e in manifest["cases"]}
    assert list(entries) == [c["name"] for c in generate_cases(0)]
    e = entries["gamma1-lam0"]
    assert e["overrides"] == {"gamma": 1.0, "lam": 0.0}
    assert e["params"] == {**preset.defaults, **preset.conventions, "gamma": 1.0, "lam": 0.0}
    assert e["file"] == "cases/gamma1-lam0.npz" and (seed_dir / e["file"]).is_file()
    assert e["shape"] == [3, 6]
    assert {"policy_loss", "value_loss", "dlogp", "dvalues"} <= (
        set(e["expected_scalars"]) | set(e["expected_arrays"]))


def test_manifest_carries_the_presets_own_tolerance(tmp_path):
    # verl rounds its Bessel factor and clip fractions to float32: float64 rtol 1e-9 + 2^-24,
    # atol 4 2^-24 where the KL loss cancels part of the policy term (verl preset docstring)
    golden.export(tmp_path, get_preset("verl"), generate_cases(0, ["random-0"]))
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["tolerances"]["float64"] == {"rtol": 1e-9 + 2.0**-24, "atol": 4 * 2.0**-24}
    assert manifest["tolerances"]["float32"] == {"rtol": 1e-4, "atol": 1e-5}
    assert "masked_var" in manifest["tolerance_note"]


def test_old_manifest_without_conventions_still_verifies(seed_dir, tmp_path):
    # a manifest written before the convention switches: no preset.conventions, params
    # without them
    import shutil

    shutil.copytree(seed_dir, tmp_path / "old")
    path = tmp_path / "old" / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["preset"]["conventions"]
    del manifest["tolerance_note"]
    conventions = set(get_preset("seed").conventions)
    for case in manifest["cases"]:
        case["params"] = {k: v for k, v in case["params"].items() if k not in conventions}
    path.write_text(json.dumps(manifest))
    report, problems = golden.verify(tmp_path / "old")
    assert report.passed and not problems, (str(report), problems)


def test_reload_is_bit_identical_to_the_cases_and_the_preset(seed_dir):
    manifest, loaded = golden.load(seed_dir)
    preset = get_preset("seed")
    for case, fresh in zip(loaded, generate_cases(0)):
        assert case["name"] == fresh["name"] and case["params"] == fresh["params"]
        for n in INPUT_NAMES:
            assert case["inputs"][n].tobytes() == fresh["inputs"][n].tobytes(), (case["name"], n)
        out = preset(fresh)
        assert set(case["expected"]) == set(out)
        for k, v in out.items():
            assert np.asarray(case["expected"][k]).tobytes() == np.asarray(v).tobytes(), k
        assert case["rejected"] is None


def test_verify_passes_and_every_output_is_reproduced_exactly(seed_dir, capsys):
    report, problems = golden.verify(seed_dir)
    assert report.passed and problems == []
    same, total = golden.bit_identical(seed_dir)
    assert same == total == sum(len(c["expected"]) for c in golden.load(seed_dir)[1])
    assert main(["verify", str(seed_dir)]) == 0
    out = capsys.readouterr().out
    assert f"bit-identical: {total} of {total}" in out and out.strip().endswith("verified")


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_exports_reloads_and_verifies(name, tmp_path):
    golden.export(tmp_path, name)
    report, problems = golden.verify(tmp_path)
    assert report.passed and problems == [], str(report)
    _, cases = golden.load(tmp_path)
    assert len(report.cases) + len(report.rejected) == len(cases) == len(
        cases_for(PRESETS[name], 0))
    # the unpadded cases serve even lm-human-preferences; every group case but one serves all
    assert len(report.cases) >= (9 if "groups" not in PRESETS[name].input_names else 10)
    assert golden.bit_identical(tmp_path)[0] == len(report.rows)


def test_rejected_cases_are_kept_with_the_reason(trl_dir):
    manifest, cases = golden.load(trl_dir)
    rejected = {c["name"]: c["rejected"] for c in cases if c["rejected"]}
    assert set(rejected) == {"left-padding", "multi-turn-holes", "garbage-in-padding",
                             "one-valid-token", "holes-discounted"}
    assert rejected["left-padding"].startswith("ValueError: trl: mask row")
    for c in cases:
        if c["rejected"]:
            assert c["expected"] == {} and set(c["inputs"]) == set(INPUT_NAMES)
    report, problems = golden.verify(trl_dir)
    assert report.passed and problems == [] and set(report.rejected) == set(rejected)


def copy_dir(src, dst):
    dst.mkdir()
    (dst / "cases").mkdir()
    for f in src.rglob("*"):
        if f.is_file():
            (dst / f.relative_to(src)).write_bytes(f.read_bytes())
    return dst


def test_tampered_expected_output_fails_verify(seed_dir, tmp_path, capsys):
    d = copy_dir(seed_dir, tmp_path / "g")
    path = d / "cases" / "random-3.npz"
    with np.load(path) as data:
        arrays = dict(data)
    arrays["expected/dvalues"] = arrays["expected/dvalues"].copy()
    arrays["expected/dvalues"][1, 2] += 1e-6
    np.savez(path, **arrays)
    report, problems = golden.verify(d)
    assert [(r.case, r.output, r.worst_index) for r in report.failures] == [
        ("random-3", "dvalues", (1, 2))]
    assert main(["verify", str(d)]) == 1
    assert "NOT verified" in capsys.readouterr().out


def test_changed_defaults_and_rejections_are_problems(trl_dir, tmp_path):
    d = copy_dir(trl_dir, tmp_path / "g")
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["preset"]["defaults"]["beta"] = 0.5
    entry = next(e for e in manifest["cases"] if e["name"] == "random-0")
    entry["rejected"] = "ValueError: made up"
    del entry["expected_arrays"], entry["expected_scalars"]
    other = next(e for e in manifest["cases"] if e["name"] == "random-1")
    other["params"]["lam"] = 0.5
    (d / "manifest.json").write_text(json.dumps(manifest))
    report, problems = golden.verify(d)
    assert any("defaults changed" in p for p in problems)
    assert any(p.startswith("random-0: rejected at export") for p in problems)
    assert [p for p in problems if "effective parameters differ" in p] == [
        "random-1: effective parameters differ from the preset's defaults updated by the "
        "case's overrides"]


def test_verify_with_a_preset_that_rejects_an_exported_case(tmp_path, capsys):
    # seed accepts left-padding; trl refuses it: a problem and 0 reproduced outputs, no crash
    golden.export(tmp_path, "seed", generate_cases(0, ["left-padding"]))
    n_outputs = len(golden.load(tmp_path)[1][0]["expected"])
    assert golden.bit_identical(tmp_path, "trl") == (0, n_outputs)
    _, problems = golden.verify(tmp_path, "trl")
    assert any(p.startswith("left-padding: the preset now rejects it") for p in problems)
    assert main(["verify", str(tmp_path), "--preset", "trl"]) == 1
    out = capsys.readouterr().out
    assert f"bit-identical: 0 of {n_outputs}" in out and "NOT verified" in out


def test_same_seed_exports_the_same_files(tmp_path):
    cases = generate_cases(5, ["random-1", "garbage-in-padding"])
    golden.export(tmp_path / "a", "seed", cases, seed=5)
    golden.export(tmp_path / "b", "seed", generate_cases(5, ["random-1", "garbage-in-padding"]),
                  seed=5)
    assert (tmp_path / "a/manifest.json").read_text() == (tmp_path / "b/manifest.json").read_text()
    for name in ("random-1", "garbage-in-padding"):
        with np.load(tmp_path / f"a/cases/{name}.npz") as x, \
                np.load(tmp_path / f"b/cases/{name}.npz") as y:
            assert sorted(x) == sorted(y)
            assert all(x[k].tobytes() == y[k].tobytes() for k in x)


class NaNStatPreset:
    """A preset-shaped object whose statistic is not finite (as TRL 0.11's std of one score)."""

    name, description, sources = "nan-stat", "test double", ()
    defaults = {"gamma": 1.0}

    def __call__(self, case, **overrides):
        return {"advantages": np.zeros_like(case["inputs"]["mask"]), "stat/std": float("nan"),
                "stat/big": float("inf"), "policy_loss": 0.1}


def test_non_finite_scalars_are_strings_that_float_reads(tmp_path):
    golden.export(tmp_path, NaNStatPreset(), generate_cases(0, ["random-0"]))
    text = (tmp_path / "manifest.json").read_text()
    json.loads(text)  # standard JSON: no bare NaN
    assert not re.search(r":\s*-?(NaN|Infinity)\b", text)
    assert '"stat/std": "nan"' in text and '"stat/big": "inf"' in text
    _, (case,) = golden.load(tmp_path)
    assert np.isnan(case["expected"]["stat/std"]) and case["expected"]["stat/big"] == np.inf
    assert case["expected"]["policy_loss"] == 0.1


def test_bad_directory_and_format(tmp_path):
    with pytest.raises(FileNotFoundError, match="manifest.json"):
        golden.load(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match="not a ppo_numpy golden manifest"):
        golden.load(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": golden.FORMAT,
                                                        "format_version": 99}))
    with pytest.raises(ValueError, match="format version 99"):
        golden.load(tmp_path)
    cases = generate_cases(0, ["random-0"]) * 2
    with pytest.raises(ValueError, match="two cases are named"):
        golden.export(tmp_path / "x", "seed", cases)


def test_an_export_whose_every_case_the_preset_rejects_is_not_verified(tmp_path, capsys):
    # trl refuses the one-valid-token case: the export keeps it, with its reason; verify
    # then compares nothing, which is no verification (issue 34: no pass on nothing)
    assert main(["export", str(tmp_path), "--preset", "trl", "--cases", "one-valid-token"]) == 0
    assert "rejected by the preset (inputs kept, no expected outputs): one-valid-token" in \
        capsys.readouterr().out
    assert main(["verify", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("NOT passed: nothing compared (the reference rejected all 1 case(s))")
    assert out.rstrip().endswith("NOT verified")


def test_a_bad_manifest_entry_is_named_by_its_path(tmp_path):
    golden.export(tmp_path, "seed", generate_cases(0, ["random-0"]))
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["input_names"][0] = 7
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    # "input_names[0]", a top-level key's item (there was a stray "." before it)
    with pytest.raises(ValueError, match=r"manifest.json: input_names\[0\]: expected "):
        golden.load(tmp_path)


# --- the loader of docs/oracle.md, without ppo_numpy --------------------------------------------

def doc_loader() -> str:
    text = DOC.read_text()
    section = text[text.index("### Loading golden files without ppo_numpy"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_doc_loader_is_short_and_plain_numpy():
    code = doc_loader()
    body = [ln for ln in code.splitlines() if ln.strip() and not ln.lstrip().startswith(
        ('"""', "import", "from"))]
    assert len(body) <= 11 and "ppo_numpy" not in code


def test_doc_loader_runs_without_ppo_numpy_and_reads_what_load_reads(trl_dir, tmp_path):
    out = tmp_path / "loaded.npz"
    script = "\n".join([
        "import sys",
        "sys.modules['ppo_numpy'] = None  # any import of ppo_numpy now fails",
        doc_loader(),
        "import json",
        "arrays, meta = {}, {}",
        f"for name, inputs, params, expected in load_goldens({str(trl_dir)!r}):",
        "    meta[name] = params",
        "    for k, v in {**inputs, **expected}.items():",
        "        arrays[name + '|' + k] = np.asarray(v)",
        f"np.savez({str(out)!r}, **arrays)",
        "print(json.dumps(meta))",
    ])
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    meta = json.loads(run.stdout)
    _, cases = golden.load(trl_dir)
    kept = [c for c in cases if c["rejected"] is None]
    assert list(meta) == [c["name"] for c in kept]
    with np.load(out) as data:
        for c in kept:
            assert meta[c["name"]] == c["effective_params"]
            for k, v in {**c["inputs"], **c["expected"]}.items():
                assert data[c["name"] + "|" + k].tobytes() == np.asarray(v).tobytes()


# --- the command line ---------------------------------------------------------------------------

def test_cli_export_then_verify(tmp_path, capsys):
    assert main(["export", str(tmp_path), "--preset", "verl", "--seed", "2",
                 "--cases", "random-0", "left-padding", "extreme-log-ratios"]) == 0
    out = capsys.readouterr().out
    assert "wrote 3 cases of preset 'verl' (seed 2)" in out
    assert "rejected by the preset (inputs kept, no expected outputs): left-padding" in out
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["seed"] == 2 and manifest["preset"]["name"] == "verl"
    assert main(["verify", str(tmp_path)]) == 0


def test_cli_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("seed", "trl", "verl", "openrlhf", "deepspeed-chat", "lm-human-preferences",
                 "random-7", "multi-turn-holes", "one-valid-token"):
        assert re.search(rf"^  {re.escape(name)}\s", out, re.M), name
    assert "(default)" in out


@pytest.mark.parametrize("argv, message", [
    (["export", "DIR", "--preset", "nope"], "unknown preset 'nope'"),
    (["export", "DIR", "--cases", "nope"], "unknown case 'nope'"),
    (["export", "DIR", "--seed", "-1"], "--seed must be >= 0"),
    (["verify", "does-not-exist"], "no manifest.json"),
])
def test_cli_errors(argv, message, tmp_path, capsys):
    argv = [str(tmp_path / a) if a in ("DIR", "does-not-exist") else a for a in argv]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_python_m_ppo_numpy_oracle_routes_here():
    run = subprocess.run([sys.executable, "-m", "ppo_numpy", "oracle", "list"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "presets (--preset NAME):" in run.stdout
