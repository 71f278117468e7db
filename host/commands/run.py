"""``fpgacnn run``: run a quantized model on a backend.

Two forms::

    fpgacnn run MODEL.onnx --input X.npy [--output Y.npy] [--labels L.npy]
                [--backend sim|reference|pynq|serial] [--report REPORT.json]
                [--config ENGINE.toml] [--waves FILE.vcd] [--bitfile NAME.bit]
                [--port DEVICE|sim] [--baud N] [--sequencer] [--stream N]
    fpgacnn run --example digits [--output Y.npy] [--backend ...] [--report ...]

``sim`` (the default) generates the engine for ``--config`` (default: the
default :class:`~fpgacnn.core.config.EngineConfig`), builds it with Verilator
once (cached) and runs the model on the simulated board; ``pynq`` runs it on a
PYNQ board with ``--bitfile``; ``serial`` on an open board (ECP5/iCE40) whose
bitstream holds the engine behind the UART bridge, through its USB-UART
``--port /dev/ttyUSB0`` at ``--baud`` (``--port sim`` simulates that bitstream);
``reference`` is the numpy integer semantics.

``X`` and ``Y`` are in the model's own graph dtype and shape, with a batch axis
first (float32 for a QDQ model with float input and output, int8 for a model
whose graph input/output is int8). With labels (and always with ``--example``,
which brings its own held-out data) the top-1 accuracy is printed.

The report is JSON::

    {"backend": "reference", "model": "digits_cnn", "model_file": "...",
     "batch": 360, "input": {...}, "output": {...},
     "layers": [{"name": "conv1", "op": "Conv", "input_shape": [1, 8, 8],
                 "output_shape": [8, 8, 8], "macs": 4608}, ...],
     "macs_per_image": ..., "total_macs": ...,      # total = per image x batch
     "accuracy": 0.96}                              # only with labels

On the engine backends each layer also has ``engine`` (bool: on the engine or
host work), ``cycles``, ``utilization``, ``stall_in_cycles``,
``stall_out_cycles``, ``runs`` and ``host_seconds``, and the report has
``total_cycles``, ``clock_mhz``, ``engine_seconds``, ``host_seconds`` (the
layers' host work and, of it, ``quantize_seconds``: the input's quantizing and
the output's dequantizing), ``end_to_end_seconds_per_image``, ``images_per_second`` (end to end),
``host_share``, ``projected_images_per_second`` (the engine alone) and the
engine configuration.
"""

import json
import time
from pathlib import Path

import numpy as np

from ...core.config import EngineConfig
from ..accelerator import BACKENDS, Accelerator
from ..arrays import check_array, check_labels, format_shape, load_array
from ..paths import check_input_file, check_output_file
from ...core.errors import InputError
from ..examples import EXAMPLES, load_example
from ..onnx_import import load_onnx

__all__ = ["add_parser", "run", "add_engine_arguments", "engine_config", "check_outputs",
           "stream_line", "write_output", "write_report"]


def add_engine_arguments(p):
    """The options every command that runs on an engine backend shares."""
    p.add_argument("--config", metavar="ENGINE.toml", type=Path,
                   help="engine configuration (default: the default EngineConfig)")
    p.add_argument("--waves", metavar="FILE.vcd", type=Path,
                   help="sim backend: write a waveform of the run (.vcd, or .fst where the "
                        "lz4 headers are installed)")
    p.add_argument("--bitfile", metavar="NAME.bit", type=Path,
                   help="pynq backend: the bitstream (NAME.hwh beside it)")
    p.add_argument("--clock-mhz", type=float, default=100.0,
                   help="engine clock for the time per image (default: %(default)s)")


def engine_config(args):
    """The EngineConfig the user asked for."""
    return EngineConfig.from_toml(args.config) if args.config is not None else EngineConfig()


def print_progress(message):
    """Progress lines of long builds and runs, indented under the command's own output."""
    print(f"  {message}", flush=True)


def add_parser(subparsers):
    p = subparsers.add_parser(
        "run", help="run a quantized ONNX model on a backend",
        description="Run a quantized ONNX model on a batch of inputs, or a bundled example "
                    "on its held-out data (--example), and print the top-1 accuracy when "
                    "labels are known.")
    p.add_argument("model", metavar="MODEL.onnx", nargs="?", type=Path,
                   help="quantized ONNX model (QDQ or QOperator int8)")
    p.add_argument("--example", choices=sorted(EXAMPLES),
                   help="run a bundled example model on its bundled held-out data instead of MODEL")
    p.add_argument("--input", metavar="X.npy", type=Path,
                   help="input batch (N, ...) in the model's input dtype and shape")
    p.add_argument("--output", metavar="Y.npy", type=Path,
                   help="write the output batch to this .npy file (exactly this name), in the "
                        "model's output dtype and shape")
    p.add_argument("--labels", metavar="LABELS.npy", type=Path,
                   help="integer class labels (N,): print top-1 accuracy")
    p.add_argument("--backend", choices=BACKENDS, default="sim",
                   help="where to run (default: %(default)s, the engine in Verilator)")
    p.add_argument("--report", metavar="REPORT.json", type=Path,
                   help="write a JSON report: layers, MACs, cycles, utilization, batch, accuracy")
    add_engine_arguments(p)
    p.add_argument("--port", metavar="DEVICE",
                   help="serial backend: the board's USB-UART (e.g. /dev/ttyUSB0), or 'sim' for "
                        "the UART bridge bitstream simulated in Verilator")
    p.add_argument("--baud", type=int, default=None,
                   help="serial backend: the bitstream's baud rate (default: 3000000)")
    p.add_argument("--sequencer", action="store_true",
                   help="sim backend: the engine with its own program sequencer and a memory "
                        "model runs the network from board memory (docs/program.md)")
    p.add_argument("--stream", metavar="N", type=int,
                   help="run the input as a stream of batches of N images, each batch's input "
                        "written while the engine runs the one before (on an engine that "
                        "sequences the network: --sequencer, or a Zynq board); prints the "
                        "stream's throughput instead of the per-layer table")
    return p


def _tensor_json(spec):
    return {"name": spec.name, "shape": ["N", *spec.shape], "dtype": np.dtype(spec.dtype).name}


#: The file names each output option accepts: the suffix says what the file holds.
OUTPUT_SUFFIXES = {"--output": (".npy",), "--report": (".json",), "--waves": (".vcd", ".fst")}


def check_outputs(args):
    """Check every output path the command was given, before anything long runs."""
    for option, suffixes in OUTPUT_SUFFIXES.items():
        check_output_file(getattr(args, option[2:], None), option, suffixes)


def write_output(path, y):
    """Write ``y`` to exactly ``path`` (``np.save`` given a name would append ``.npy``)."""
    try:
        with open(path, "wb") as f:
            np.save(f, y, allow_pickle=False)
    except OSError as e:
        raise InputError(f"--output {path}: cannot write ({e.strerror or e})") from None


def write_report(path, report, argument="--report"):
    """Write a JSON report; a failure is one line, not a traceback."""
    try:
        path.write_text(json.dumps(report, indent=2) + "\n")
    except OSError as e:
        raise InputError(f"{argument} {path}: cannot write ({e.strerror or e})") from None


def _float_accuracy(example, count=None):
    """Top-1 accuracy of the example's float model on its first ``count``
    held-out images, by onnxruntime (for comparison)."""
    import onnxruntime as ort
    session = ort.InferenceSession(str(example.float_model), providers=["CPUExecutionProvider"])
    x, y = example.x[:count], example.y[:count]
    logits = session.run(None, {session.get_inputs()[0].name: x})[0]
    return float((logits.argmax(1) == y).mean())


def _data(args):
    """What to run on: ``(example or None, model path, x, labels or None, how the
    user named x, how the user named the labels)``."""
    if args.example is not None:
        if args.model is not None:
            raise InputError(f"give either MODEL.onnx or --example, not both "
                             f"(got {args.model} and --example {args.example})")
        for option in ("input", "labels"):
            if getattr(args, option) is not None:
                raise InputError(f"--{option} cannot be used with --example "
                                 f"(the example brings its own held-out data)")
        example = load_example(args.example)
        named = f"--example {args.example}"
        return example, example.model, example.x, example.y, named, named
    if args.model is None:
        raise InputError("give a MODEL.onnx to run, or --example " + "|".join(sorted(EXAMPLES)))
    if args.input is None:
        raise InputError(f"--input X.npy is required to run {args.model}")
    check_input_file(args.model, "MODEL", "an ONNX file")
    x = load_array(args.input, "--input")
    labels = None if args.labels is None else load_array(args.labels, "--labels")
    return None, args.model, x, labels, f"--input {args.input}", f"--labels {args.labels}"


def run(args):
    example, model_path, x, labels, input_argument, labels_argument = _data(args)
    check_outputs(args)

    model = load_onnx(model_path)
    check_array(x, name=model.input.name, shape=("N", *model.input.shape),
                dtype=model.input.dtype, argument=input_argument)
    batch = len(x)
    if labels is not None:
        check_labels(labels, batch, labels_argument)
        if len(model.output.shape) != 1:
            raise InputError(
                f"{labels_argument}: top-1 accuracy needs a model output of shape (N, classes), "
                f"'{model.output.name}' has shape {format_shape(('N', *model.output.shape))}")

    simulated_serial = args.backend == "serial" and args.port == "sim"
    if args.waves is not None and args.backend != "sim" and not simulated_serial:
        raise InputError(f"--waves needs the sim backend, not {args.backend}"
                         + (" on a device (--port sim simulates it)" if args.backend == "serial" else ""))
    for option in ("port", "baud"):
        if getattr(args, option) is not None and args.backend != "serial":
            raise InputError(f"--{option} needs the serial backend, not {args.backend}")
    if args.sequencer and args.backend != "sim":
        raise InputError(f"--sequencer is simulated on the sim backend only, not "
                         f"--backend {args.backend}")
    if args.backend == "serial" and args.port is None:
        raise InputError("the serial backend needs --port DEVICE (the board's USB-UART, e.g. "
                         "/dev/ttyUSB0) or --port sim")
    if args.stream is not None and args.stream < 1:
        raise InputError(f"--stream takes a positive number of images per batch, not "
                         f"{args.stream}")
    config = engine_config(args)
    # With the batch known, the model is compiled for it before a board is
    # opened: a layer the engine cannot run is refused before any build.
    compiled = batch if args.stream is None else min(args.stream, batch)
    with Accelerator(model, backend=args.backend, config=config, batch=compiled,
                     waves=args.waves, bitfile=args.bitfile, port=args.port, baud=args.baud,
                     sequencer=args.sequencer or None,
                     clock_hz=args.clock_mhz * 1e6, progress=print_progress) as accelerator:
        start = time.perf_counter()
        if args.stream is None:
            y = accelerator.run(x)
        else:
            y = np.concatenate(list(accelerator.run_stream(
                x[i:i + args.stream] for i in range(0, batch, args.stream))))
        seconds = time.perf_counter() - start
        engine_report = accelerator.report

    print(f"model {model.name} ({model_path.name}): {len(model.layers)} layers, "
          f"{model.macs:,} MACs per image")
    print(f"backend {args.backend}: {batch} image{'s' if batch != 1 else ''} "
          f"in {seconds:.2f} s")
    if engine_report.get("stream"):
        print(stream_line(engine_report))
    elif args.backend != "reference":
        print_cycles(engine_report)
    accuracy = None
    if labels is not None:
        correct = int((y.argmax(axis=1) == labels).sum())
        accuracy = correct / batch
        print(f"top-1 accuracy: {accuracy:.2%} ({correct}/{batch})")
    if example is not None:
        print(f"float model (onnxruntime): {_float_accuracy(example):.2%}")

    if args.output is not None:
        write_output(args.output, y)
        print(f"wrote {args.output}: {format_shape(y.shape)} {y.dtype}")
    if args.report is not None:
        report = {
            "backend": args.backend,
            "model": model.name,
            "model_file": str(model_path),
            "batch": batch,
            "input": _tensor_json(model.input),
            "output": _tensor_json(model.output),
            "layers": _layer_json(model, engine_report),
            "macs_per_image": int(model.macs),
            "total_macs": int(model.macs) * batch,
            "seconds": round(seconds, 6),
        }
        for key in ("engine", "peak_macs_per_cycle", "clock_mhz", "total_cycles",
                    "engine_seconds", "host_seconds", "quantize_seconds",
                    "end_to_end_seconds_per_image",
                    "images_per_second", "host_share", "projected_images_per_second",
                    "sequencer", "stream", "overlapped", "batches",
                    "host_overlapped_seconds", "host_serial_seconds", "end_to_end_seconds",
                    "per_batch"):
            if key in engine_report:
                report[key] = engine_report[key]
        if accuracy is not None:
            report["accuracy"] = accuracy
        write_report(args.report, report)
        print(f"wrote {args.report}")
    return 0


def _layer_json(model, engine_report):
    """Per-layer report entries: the IR's shapes and MACs, plus what the engine measured.

    A fused pair (Conv + MaxPool) is one engine step; both layers get its
    measurements, the pool marked ``fused_into``.
    """
    measured = {}
    for entry in engine_report.get("layers", []):
        for part in entry["name"].split("+"):
            measured[part] = entry
    layers = []
    for layer in model.layers:
        item = {"name": layer.name, "op": layer.op, "input_shape": list(layer.input_shape),
                "output_shape": list(layer.output_shape), "macs": int(layer.macs)}
        step = measured.get(layer.name)
        if step is not None:
            if step["name"] != layer.name and not step["name"].startswith(layer.name + "+"):
                item["fused_into"] = step["name"].split("+")[0]
            else:
                item.update({k: v for k, v in step.items() if k not in ("name", "op", "macs")})
        layers.append(item)
    return layers


def print_cycles(report):
    """The per-layer cycle table of an engine run."""
    print(f"{'layer':<24} {'op':<14} {'where':<6} {'cycles':>10} {'util':>6} {'host ms':>8}")
    for entry in report["layers"]:
        if entry.get("engine"):
            print(f"{entry['name']:<24} {entry['op']:<14} {'engine':<6} {entry['cycles']:>10,} "
                  f"{entry['utilization']:>6.1%} {entry['host_seconds'] * 1e3:>8.1f}")
        else:
            print(f"{entry['name']:<24} {entry['op']:<14} {'host':<6} {'':>10} {'':>6} "
                  f"{entry['host_seconds'] * 1e3:>8.1f}")
    print(end_to_end_line(report))


def stream_line(report):
    """A stream's throughput (``Accelerator.run_stream``'s report)."""
    images = report["images"]
    if not report.get("total_cycles"):
        return f"stream of {report['batches']} batches, {images} images; no engine cycles"
    engine = report["engine_seconds"] / images
    waiting = report["host_serial_seconds"] / images
    beside = report["host_overlapped_seconds"] / images
    how = ("each batch's input written while the engine ran the one before"
           if report["overlapped"] else "one batch after another (the program stops the "
           "sequencer for the host, or the board has none)")
    return (f"stream of {report['batches']} batches of {report['batch']} ({images} images), "
            f"{how}: total {report['total_cycles']:,} engine cycles; per image "
            f"{report['end_to_end_seconds_per_image'] * 1e3:.3f} ms end to end "
            f"(engine {engine * 1e3:.3f} ms at {report['clock_mhz']:g} MHz, host "
            f"{waiting * 1e3:.3f} ms while it waited, {beside * 1e3:.3f} ms beside it, "
            f"measured here); {report['images_per_second']:,.0f} images/s")


def end_to_end_line(report):
    """The run's time per image, end to end: the engine's cycles at the clock plus
    the host's measured work (issue 16: the report tells the truth)."""
    if not report.get("total_cycles"):
        return "no engine cycles"
    batch, mhz = report["batch"], report["clock_mhz"]
    engine, host = report["engine_seconds"] / batch, report["host_seconds"] / batch
    return (f"total {report['total_cycles']:,} engine cycles for {batch} images; per image "
            f"{(engine + host) * 1e3:.3f} ms end to end = engine {engine * 1e3:.3f} ms at "
            f"{mhz:g} MHz + host {host * 1e3:.3f} ms (measured here); "
            f"{report['images_per_second']:,.0f} images/s end to end, "
            f"{report['projected_images_per_second']:,.0f} by the engine alone")
