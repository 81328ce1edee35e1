"""One comparison run: a model in each runtime (or against stored outputs), every compared tensor
measured against the baseline, in topological order, and the first one out of tolerance."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from onnx import helper

import opforge_spec as spec

from . import inputs as feeding
from . import model as models
from . import npz, runtimes, tolerances
from .compare import Metrics, float_dtype, judged_dtype, measure, measure_quantized
from .errors import AlignError

GOLDEN = "stored"  # the baseline's name when --load-outputs gives it


@dataclass
class Options:
    runtimes: list = field(default_factory=lambda: ["ort", "reference"])
    inputs: Path | None = None
    all_tensors: bool = False
    save_outputs: Path | None = None
    load_outputs: Path | None = None
    overrides: list = field(default_factory=list)     # tolerances.Override
    libraries: list = field(default_factory=list)     # extra ORT custom-op libraries
    dims: dict = field(default_factory=dict)
    seed: int = 0
    precision: str = "float64"                         # of the reference run: float64 | model
    skip_unavailable: bool = False
    stored_inputs: dict | None = None                 # feeds by name (export folders)
    stored_from: str = ""                              # the file stored_inputs were read from
    exported_program: Path | None = None              # the torch runtime's .pt2
    max_input_bytes: int = npz.DEFAULT_MAX_MIB * npz.MIB  # inputs together; each stored array


@dataclass
class TensorResult:
    tensor: str
    node: str
    op: str
    order: int
    subject: str
    baseline: str
    output: str = ""    # which output of its node (Y or H of AddRMSNorm; model.TensorInfo)
    dtype: str = ""
    shape: list = field(default_factory=list)
    tolerance: tolerances.Tolerance | None = None
    metrics: Metrics | None = None
    missing: str = ""   # why it was not compared

    @property
    def ok(self) -> bool | None:
        """True/False when compared; None when the baseline lacks it (not judged)."""
        if self.metrics is not None:
            return self.metrics.ok
        return None if self.missing.startswith("baseline") else False


@dataclass
class Report:
    model: str
    runtimes: list
    baseline: str
    subjects: list
    all_tensors: bool
    inputs: dict
    results: list = field(default_factory=list)   # TensorResult, topological then subject
    skipped_runtimes: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)     # one line each: what was not done and why
    timings_s: dict = field(default_factory=dict)
    saved: str = ""
    arrays: dict = field(default_factory=dict)    # source -> {tensor: array} (plots)

    @property
    def first_divergence(self) -> TensorResult | None:
        return next((r for r in self.results if r.ok is False), None)

    @property
    def ok(self) -> bool:
        return self.first_divergence is None


def run(path, options: Options) -> Report:
    started = time.perf_counter()
    _check_program_option(options)
    model = models.load(path)
    golden, notes = _golden(model, options)
    usable, skipped = _usable_runtimes(options)
    names, compared_notes = _compared(model, options.all_tensors, golden, usable)
    feeds, input_notes = _feeds(model, options, golden)
    notes += compared_notes + input_notes
    baseline, subjects = _roles(usable, golden, options.save_outputs)
    every = len(names) == len(model.tensors)
    report = Report(str(path), list(options.runtimes), baseline, subjects, every,
                    {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in feeds.items()},
                    skipped_runtimes=skipped, notes=notes)
    report.timings_s["load"] = time.perf_counter() - started
    proto = model.with_outputs(names)
    outputs = _run_all(model, proto, feeds, names, usable, options, report.timings_s)
    if golden is not None:
        assert options.load_outputs is not None  # golden is read from it
        report.notes += feeding.check_stored_dtypes(
            options.load_outputs, golden,
            _produced_dtypes(outputs, names, skip=_declared_dtypes(model, golden)))
        outputs[GOLDEN] = golden
    if options.save_outputs:
        report.saved = _save(options.save_outputs, feeds, outputs[usable[0]])
    began = time.perf_counter()
    for subject in subjects:
        report.results += _compare(model, names, outputs[subject], outputs[baseline], subject,
                                   baseline, options.overrides)
    report.results.sort(key=lambda r: (r.order, subjects.index(r.subject)))
    report.timings_s["compare"] = time.perf_counter() - began
    report.timings_s["total"] = time.perf_counter() - started
    report.arrays = outputs
    return report


def _golden(model, options: Options) -> tuple:
    """(the stored outputs of --load-outputs or None, notes on their dtypes)."""
    if not options.load_outputs:
        return None, []
    golden = feeding.stored_outputs(options.load_outputs, model, max_bytes=options.max_input_bytes,
                                    with_inputs=options.inputs is None)
    declared = _declared_dtypes(model, golden)
    return golden, feeding.check_stored_dtypes(options.load_outputs, golden, declared)


def _declared_dtypes(model, names) -> dict:
    """name -> the dtype the model (with shape inference) gives each of `names` it computes."""
    found: dict = {}
    for name in names:
        elem = model.elem_types.get(name)
        if elem and model.info(name) is not None:
            try:
                found[name] = np.dtype(models.np_dtype(elem))
            except (KeyError, TypeError, ValueError):
                continue  # an element type numpy has no dtype for: judged by what runs produce
    return found


def _feeds(model, options: Options, golden: dict | None) -> tuple:
    stored: dict | None
    if options.stored_inputs is not None:
        stored, source = options.stored_inputs, options.stored_from or "the stored inputs"
    else:
        stored, source = golden, str(options.load_outputs or "")
    return feeding.feeds(model, npz_path=options.inputs, stored=stored, stored_source=source,
                         dims=options.dims, seed=options.seed, max_bytes=options.max_input_bytes)


def _produced_dtypes(outputs: dict, names: list, *, skip) -> dict:
    """name -> dtype a runtime produced, for the compared tensors whose type the model leaves
    open (`skip`: the ones it declares)."""
    found: dict = {}
    for arrays in outputs.values():
        for name in names:
            if name not in skip and name in arrays:
                found.setdefault(name, np.asarray(arrays[name]).dtype)
    return found


def _compared(model, all_tensors: bool, golden: dict | None, usable: list) -> tuple:
    """(the tensors to compare, topological; notes): against stored outputs, every one they hold
    too - except with the torch runtime, whose intermediate tensors have no ONNX names."""
    wanted = set(model.compared_tensors(all_tensors))
    if golden is not None:
        wanted |= set(golden)
    names = [t.name for t in model.tensors if t.name in wanted]
    notes = model.uncompared_subgraphs() if all_tensors else []
    if "torch" not in usable:
        return names, notes
    outputs = set(model.outputs)
    if set(names) <= outputs:
        return names, notes
    note = ("torch: an exported program's intermediate tensors have no ONNX names: compared the "
            "graph outputs only" + (" (--all-tensors not applied)" if all_tensors else ""))
    return [n for n in names if n in outputs], [*notes, note]


def _check_program_option(options: Options) -> None:
    """An exported program is run by the torch runtime only: naming one without it is a slip."""
    if options.exported_program is not None and "torch" not in options.runtimes:
        raise AlignError(f"--exported-program {options.exported_program}: only the torch "
                         f"runtime runs it, but --runtimes is {','.join(options.runtimes)} "
                         "(add torch)")


def _usable_runtimes(options: Options) -> tuple:
    usable, skipped = [], {}
    for name in options.runtimes:
        reason = runtimes.unavailable(name, program=options.exported_program)
        if reason and not options.skip_unavailable:
            raise AlignError(reason)
        if reason:
            skipped[name] = reason
        else:
            usable.append(name)
    if not usable:
        raise AlignError("no runtime left to run: " + "; ".join(skipped.values()))
    return usable, skipped


def _roles(usable: list, golden, saving) -> tuple:
    """(baseline, subjects): the stored outputs, else the float64 reference, else the first."""
    if golden is not None:
        return GOLDEN, list(usable)
    if len(usable) < 2:
        if saving:
            return usable[0], []
        raise AlignError(f"nothing to compare: only {usable[0]} can run; name two runtimes (e.g. "
                         "--runtimes ort,reference) or give --load-outputs GOLDEN.npz")
    baseline = "reference" if "reference" in usable else usable[0]
    return baseline, [r for r in usable if r != baseline]


def _run_all(model, proto, feeds, names, usable, options, timings) -> dict:
    libraries = runtimes.ort_libraries(model, options.libraries) \
        if any(r.startswith("ort") for r in usable) else []
    outputs = {}
    for name in usable:
        began = time.perf_counter()
        outputs[name] = runtimes.run(name, model, proto, feeds, names, libraries=libraries,
                                     precision=options.precision,
                                     program=options.exported_program)
        timings[name] = time.perf_counter() - began
    return outputs


def _save(path: Path, feeds: dict, tensors: dict) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:  # np.savez(path) would append ".npz" to other suffixes
        np.savez(handle, **{k: _storable(v) for k, v in {**feeds, **tensors}.items()})
    return str(path)


def _storable(array):
    """An array .npz can hold and give back: ml_dtypes' float8 (RMSNormQuant's Q) has no numpy
    type string (it would come back as raw bytes, 'V1'), so it is stored as the float32 holding
    its values exactly."""
    array = np.asarray(array)
    return array.astype(np.float32) if array.dtype.name.startswith("float8") else array


def _compare(model, names, actual: dict, expected: dict, subject, baseline, overrides) -> list:
    dtypes = {n: _dtype_of(model, n, actual.get(n), expected.get(n))
              for n in (t.name for t in model.tensors)}
    budgets = tolerances.budgets(model, dtypes, overrides)
    results = []
    for name in names:
        info = model.info(name)
        result = TensorResult(name, info.node, info.op, info.order, subject, baseline,
                              output=info.output, tolerance=budgets[name])
        if name not in expected:
            result.missing = f"baseline: {baseline} has no {name!r}"
        elif name not in actual:
            result.missing = f"{subject} did not produce it"
        else:
            a = np.asarray(actual[name])
            result.dtype, result.shape = str(a.dtype), list(a.shape)
            result.metrics = _measure(model, info, a, expected[name], budgets[name])
        results.append(result)
    return results


def _measure(model, info, actual, expected, tolerance) -> Metrics:
    """A quantized output within one quantization step (measure_quantized), any other tensor
    within its tolerance."""
    qdtype = quantized_dtype(model, info)
    if qdtype:
        return measure_quantized(actual, expected, qdtype)
    return measure(actual, expected, tolerance.rtol, tolerance.atol)


def quantized_dtype(model, info) -> str:
    """The dtype (int8, float8_e4m3fn) of tensor `info` when it is an opforge op's quantized
    output (its dtype picked by an enum attribute: the node's value, else the default); else ""."""
    domain, _, name = info.op.rpartition("::")
    op = spec.OPS.get(name) if domain == spec.DOMAIN else None
    if op is None or not info.output or not op.quantized_output(info.output):
        return ""
    node = model.proto.graph.node[info.order]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name in op.attributes}
    try:
        return op.output_dtype(info.output, "", attrs)
    except KeyError:  # not one of the enum's values: the runtimes refuse the node themselves
        return ""


def _dtype_of(model, name: str, array, baseline) -> str | None:
    """The dtype `name` is judged in: the coarser of the two sides' (a float64 reference against
    a float32 golden: float32), else the model's."""
    if array is not None:
        return judged_dtype(array, baseline) if baseline is not None else float_dtype(array)
    elem = model.elem_types.get(name)
    return float_dtype(np.zeros(0, models.np_dtype(elem))) if elem else "float32"
