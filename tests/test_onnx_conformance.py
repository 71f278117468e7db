"""ONNX's own operator conformance cases (issue 14, item 3), as int8 models.

Every case of the operators fpgacnn imports (harvested from the installed
``onnx`` wheel's generators by ``onnx_conformance_cases``; float cases wrapped
in QuantizeLinear / DequantizeLinear, quantized ones as they are, plus the
``-uint8`` / ``-qop`` / ``-inputs`` variants described there) either

- loads, runs in the reference and matches onnxruntime (graph optimizations
  off) within 1 LSB everywhere, or
- is refused with one line, a ``ModelError`` / ``InputError`` whose message
  fully matches the anchored pattern listed for it in :data:`REFUSED`.

Any other exception fails the test, and so does a case that is refused
without being listed, or listed but no longer refused: the table is the
record of what the importer refuses and why (docs/runtime.md lists it).

The wrapped float cases are also checked to still compute the case: the
dequantized onnxruntime output is within :data:`FIDELITY_LSB` output LSB of
the case's own expected output (the error of quantizing the input), except
where :data:`LOSSY` says why not.
"""

import re

import numpy as np
import onnx
import pytest

import onnx_conformance_cases as C
from onnx_model_builders import ort_session
from fpgacnn.core.errors import InputError, ModelError
from fpgacnn.host.onnx_import import load_onnx
from fpgacnn.host.reference import ReferenceBackend

#: ``{node}`` stands for ``node '<case>' (<Op>): ``, ``{file}`` for ``<path>: ``.
NODE, FILE = "{node}", "{file}"
_SHAPE = FILE + (r"graph input '\w+' must be \(N, C, H, W\), \(N, C, L\) or \(N, C\) with fixed "
                 r"C, H, W, L")
_RANK = NODE + (r"a tensor of per-image shape \([\d, ]+\) is not supported \(only \(C,\), \(C, L\), "
                r"\(C, H, W\)\)")
_FLATTEN = NODE + (r"axis=-?\d is not supported on a rank-4 tensor \(only 1 or -3: flatten each "
                   r"image, keep the batch axis\)")
_NO_ACT = (NODE + r"its input 'x_dq' is the \(dequantized\) graph input; fpgacnn fuses a Relu / Clip "
           r"into the layer that writes its input and has no standalone activation layer")


def _all(*names):
    """The test ids of these cases: every form each of them has (``<case>``,
    ``<case>-uint8``, ``<case>-qop``, ``<case>-qop_uint8``)."""
    cases = C.harvest()
    return [n + (f"-{v}" if v else "") for n in names for v in cases[n].variants()]


#: Expected refusals: ``(why, anchored pattern of the message, test ids)``.
REFUSED = [
    # -- inputs fpgacnn does not take -------------------------------------------
    ("a graph input of rank 1 (no per-image axis) or 5 (3-D pooling), or an empty axis", _SHAPE,
     _all("test_matmul_1d_3d", "test_matmul_1d_1d", "test_maxpool_3d_default",
        "test_maxpool_3d_dilations", "test_maxpool_3d_dilations_use_ref_impl",
        "test_maxpool_3d_dilations_use_ref_impl_large", "test_averagepool_3d_default")
     + _all("test_averagepool_3d_dilations_small",
          "test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_True",
          "test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_False",
          "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True",
          "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_False",
          "test_clip_example", "test_clip_inbounds", "test_clip_outbounds", "test_clip_splitbounds",
          "test_clip_min_greater_than_max", "test_clip_default_inbounds", "test_concat_1d_axis_0",
          "test_concat_1d_axis_negative_1", "test_dropout_default_old", "test_reduce_max_empty_set")
     + _all("test_sigmoid_example")
     + ["test_clip_default_int8_inbounds", "test_quantizelinear", "test_quantizelinear_e4m3fn",
        "test_quantizelinear_e5m2", "test_quantizelinear_uint16", "test_quantizelinear_int16",
        "test_dequantizelinear"]),
    ("a graph input that is not float32, int8 or uint8",
     FILE + r"graph input '\w+' has type (int16|uint16|uint32|uint64|bool|float8_e4m3fn|float8_e5m2|"
            r"u?int4|u?int2|float4_e2m1fn); fpgacnn takes float32, int8 or uint8",
     ["test_add_int16", "test_add_uint16", "test_add_uint32", "test_add_uint64",
      "test_reduce_max_bool_inputs", "test_reduce_max_empty_set_bool",
      "test_dequantizelinear_e4m3fn", "test_dequantizelinear_e4m3fn_float16",
      "test_dequantizelinear_e4m3fn_zero_point", "test_dequantizelinear_e5m2",
      "test_dequantizelinear_uint16", "test_dequantizelinear_int16", "test_dequantizelinear_uint4",
      "test_dequantizelinear_int4", "test_dequantizelinear_uint2", "test_dequantizelinear_int2",
      "test_dequantizelinear_float4e2m1"]),
    ("a graph input that is a sequence or an optional",
     FILE + r"graph input '\w+' is (a sequence|an optional); fpgacnn takes one tensor",
     ["test_identity_sequence", "test_identity_opt"]),
    ("an integer model that never states its quantization (the uint8 MaxPool case has no scale)",
     FILE + r"graph input 'x' is never read with a scale \(no QuantizeLinear, DequantizeLinear or "
            r"QLinear operator states its quantization\)",
     ["test_maxpool_2d_uint8"]),
    ("scales and zero points given as graph inputs",
     NODE + r"input scale '(x|a)_scale' is a graph input; fpgacnn needs it as a constant initializer",
     ["test_qlinearconv-inputs"]
     + [f"test_qlinearmatmul_{d}_{q}_{f}-inputs" for q in ("uint8", "int8")
        for f in ("float32", "float16") for d in ("2D", "3D")]),
    # -- quantization fpgacnn does not represent ----------------------------------
    ("uint8 weights (QLinearConv: zero point 255; QLinearMatMul: zero point 114)",
     NODE + r"weights have type uint8; fpgacnn needs int8 weights",
     ["test_qlinearconv"] + [f"test_qlinearmatmul_{d}_uint8_{f}" for f in ("float32", "float16")
                             for d in ("2D", "3D")]),
    ("int8 weights with a non-zero zero point (-13)",
     NODE + r"weights have a non-zero zero point; fpgacnn needs symmetric weights \(zero point 0\)",
     [f"test_qlinearmatmul_{d}_int8_{f}" for f in ("float32", "float16") for d in ("2D", "3D")]),
    ("per-axis or blocked activation quantization",
     NODE + r"per-axis activation quantization is not supported",
     ["test_quantizelinear_axis", "test_quantizelinear_uint4", "test_quantizelinear_int4",
      "test_quantizelinear_uint2", "test_quantizelinear_int2", "test_quantizelinear_float4e2m1",
      "test_quantizelinear_blocked_asymmetric", "test_quantizelinear_blocked_symmetric",
      "test_dequantizelinear_axis", "test_dequantizelinear_blocked"]),
    ("integer arithmetic without quantization (Add of int8 / uint8 tensors)",
     NODE + r"operand 'y' is a constant \(u?int8\) without DequantizeLinear; it must be a quantized "
            r"constant \(DequantizeLinear of an int8 initializer\)",
     ["test_add_int8", "test_add_uint8"]),
    ("Clip of an int8 tensor without quantization",
     NODE + r"input 'x' must be a float result or a dequantized int8 tensor",
     ["test_clip_default_int8_min", "test_clip_default_int8_max"]),
    # -- operators and attributes -----------------------------------------------
    ("operators fpgacnn does not import (int32 results; deprecated Upsample)",
     NODE + r"operator (ConvInteger|MatMulInteger|Upsample) is not supported",
     ["test_convinteger_without_padding", "test_convinteger_with_padding", "test_matmulinteger",
      "test_upsample_nearest"]),
    ("a BatchNormalization in a quantized model (fpgacnn quantize folds it)",
     NODE + r"a BatchNormalization left in a quantized model is not supported; quantize the float "
            r"model with `fpgacnn quantize`, which folds it into the Conv or Gemm before it "
            r"\(onnxruntime's quant_pre_process folds it after a Conv only\)",
     ["test_batchnorm_example", "test_batchnorm_epsilon", "test_batchnorm_example_training_mode",
      "test_batchnorm_epsilon_training_mode"]),
    ("a standalone Relu / Clip (on the graph input): fpgacnn fuses activations into the layer "
     "before them and has no activation layer of its own", _NO_ACT,
     _all("test_relu", "test_clip", "test_clip_default_min", "test_clip_default_max")),
    ("Gemm transA", NODE + r"transA=1 is not supported",
     _all("test_gemm_transposeA", "test_gemm_all_attributes")),
    ("Gemm alpha / beta other than 1", NODE + r"(alpha|beta)=0\.5 is not supported \(only 1\)",
     _all("test_gemm_alpha", "test_gemm_beta")),
    ("a Gemm bias with one row per batch row", NODE + (
        r"bias of shape \[3, 4\] is not one value per output channel \(\(4,\) or \(1, 4\)\); "
        r"fpgacnn does not support a per-row bias"),
     _all("test_gemm_default_matrix_bias")),
    ("batched MatMul (weights of 3 or 4 dimensions) or a 1-D second operand",
     NODE + r"(MatMul weights must be 2-D, not [34]-D|weights of shape \(3,\) have no "
            r"output-channel axis 1)",
     _all("test_matmul_3d", "test_matmul_4d", "test_matmul_bcast", "test_matmul_4d_1d")),
    ("MaxPool Indices output / storage_order",
     NODE + r"(the Indices output|storage_order=1) is not supported",
     _all("test_maxpool_with_argmax_2d_precomputed_pads",
        "test_maxpool_with_argmax_2d_precomputed_strides")),
    ("pooling dilations", NODE + r"dilations=\[2, 2\] are not supported",
     _all("test_maxpool_2d_dilations", "test_averagepool_2d_dilations")),
    ("an Add operand with a batch axis of its own (broadcasting only per image)",
     NODE + r"constant operand of shape \(3, 4, 5\) does not broadcast to \(4, 5\)",
     _all("test_add")),
    ("Concat of a constant (the case's second input; fpgacnn concatenates activations)",
     NODE + r"input 1 'value1' is a constant; fpgacnn expects an activation here",
     _all("test_concat_2d_axis_0", "test_concat_2d_axis_1", "test_concat_2d_axis_negative_2",
        "test_concat_2d_axis_negative_1", "test_concat_3d_axis_0", "test_concat_3d_axis_1",
        "test_concat_3d_axis_2", "test_concat_3d_axis_negative_3", "test_concat_3d_axis_negative_2",
        "test_concat_3d_axis_negative_1")),
    ("Flatten into the batch axis", _FLATTEN,
     _all("test_flatten_axis0", "test_flatten_axis2", "test_flatten_axis3",
        "test_flatten_negative_axis4", "test_flatten_negative_axis2", "test_flatten_negative_axis1")),
    ("Reshape that changes the batch axis",
     NODE + r"Reshape to \[(4, 2, 3|24)\] changes the batch axis",
     _all("test_reshape_reordered_all_dims", "test_reshape_one_dim")),
    ("Reshape whose -1 would change the batch size",
     NODE + r"Reshape to \[-1, 2, 3, 4\] does not keep the batch axis \(N, 12 values per image\)",
     _all("test_reshape_negative_extended_dims")),
    ("Reshape allowzero", NODE + r"allowzero=1 with a zero in the shape is not supported",
     _all("test_reshape_allowzero_reordered")),
    ("Squeeze of the batch axis", NODE + r"squeezing the batch axis is not supported",
     _all("test_squeeze")),
    ("Unsqueeze of the batch axis", NODE + r"a new batch axis is not supported",
     _all("test_unsqueeze_axis_0")),
    ("tensors of per-image rank 4 or more", _RANK,
     _all("test_unsqueeze_two_axes", "test_unsqueeze_three_axes", "test_unsqueeze_unsorted_axes",
        "test_unsqueeze_negative_axes")),
    ("Resize modes other than nearest (including all tf_crop_and_resize cases)",
     NODE + r"mode=(linear|cubic) is not supported \(only nearest\)",
     _all("test_resize_upsample_scales_linear", "test_resize_upsample_scales_linear_align_corners",
        "test_resize_downsample_scales_linear", "test_resize_downsample_scales_linear_align_corners",
        "test_resize_upsample_scales_cubic", "test_resize_upsample_scales_cubic_align_corners",
        "test_resize_downsample_scales_cubic", "test_resize_downsample_scales_cubic_align_corners",
        "test_resize_upsample_sizes_cubic", "test_resize_downsample_sizes_cubic",
        "test_resize_upsample_scales_cubic_A_n0p5_exclude_outside",
        "test_resize_downsample_scales_cubic_A_n0p5_exclude_outside",
        "test_resize_upsample_scales_cubic_asymmetric", "test_resize_tf_crop_and_resize",
        "test_resize_tf_crop_and_resize_extrapolation_value",
        "test_resize_downsample_sizes_linear_pytorch_half_pixel",
        "test_resize_downsample_scales_linear_antialias",
        "test_resize_downsample_sizes_linear_antialias",
        "test_resize_downsample_scales_cubic_antialias",
        "test_resize_downsample_sizes_cubic_antialias", "test_resize_tf_crop_and_resize_axes_2_3",
        "test_resize_tf_crop_and_resize_axes_3_2",
        "test_resize_downsample_scales_linear_half_pixel_symmetric",
        "test_resize_upsample_scales_linear_half_pixel_symmetric")),
    ("Resize keep_aspect_ratio_policy not_larger / not_smaller",
     NODE + r"keep_aspect_ratio_policy other than stretch is not supported",
     _all("test_resize_upsample_sizes_nearest_not_larger",
        "test_resize_upsample_sizes_nearest_not_smaller",
        "test_resize_downsample_sizes_nearest_not_larger",
        "test_resize_downsample_sizes_nearest_not_smaller")),
    ("Softmax over the batch axis", NODE + r"softmax over the batch axis is not supported",
     _all("test_softmax_axis_0")),
    ("ReduceMean / ReduceMax over other axes than the spatial ones (a (3, 2, 2) input is (N, C, L))",
     NODE + r"Reduce(Mean|Max) over axes \[(1|0, 1, 2)\] is not supported \(only the spatial axes "
            r"\[2\] of an \(N, C, \.\.\.\) tensor: a global pool\)",
     _all(*[f"test_reduce_{op}_{form}" for op in ("mean", "max")
          for form in ("do_not_keepdims_example", "do_not_keepdims_random", "keepdims_example",
                       "keepdims_random", "negative_axes_keepdims_example",
                       "negative_axes_keepdims_random")],
        "test_reduce_mean_default_axes_keepdims_example",
        "test_reduce_mean_default_axes_keepdims_random", "test_reduce_max_default_axes_keepdim_example",
        "test_reduce_max_default_axes_keepdims_random")),
    ("Dropout in training mode", NODE + r"training_mode=1 is not supported",
     _all("test_training_dropout_default", "test_training_dropout_default_mask",
        "test_training_dropout", "test_training_dropout_mask", "test_training_dropout_zero_ratio",
        "test_training_dropout_zero_ratio_mask")),
]

#: Wrapped float cases checked against their own expected output: within this
#: many output LSB (the error of quantizing the input shows as up to ~1.5).
FIDELITY_LSB = 2.0
#: Wrapped cases whose int8 form cannot reproduce the case, and why.
LOSSY = {
    "test_softmax_large_number": "one per-tensor input scale for 0..3 and 10000..10003: every "
                                 "row quantizes to equal values",
}


def _refusals():
    table = {}
    for why, pattern, ids in REFUSED:
        for case_id in ids:
            assert case_id not in table, f"{case_id} is listed twice"
            table[case_id] = (why, pattern)
    return table


EXPECTED = _refusals()
IDS = C.case_ids()


def test_refusal_table_names_existing_cases():
    """Every id in the table is a harvested case (a renamed case is noticed)."""
    assert sorted(set(EXPECTED) - set(IDS)) == []
    assert sorted(set(LOSSY) - {i.split("-")[0] for i in IDS}) == []


def _pattern(pattern, case, path):
    return (pattern.replace(NODE, rf"node '{re.escape(case.name)}' \(\w+\): ")
            .replace(FILE, re.escape(str(path)) + ": "))


def _int8_domain(y):
    y = np.asarray(y)
    return y.astype(np.int64) - (128 if y.dtype == np.uint8 else 0)


@pytest.mark.parametrize("case_id", IDS)
def test_conformance(case_id, tmp_path):
    name, _, variant = case_id.partition("-")
    case = C.harvest()[name]
    built = C.build(case, variant)
    path = tmp_path / f"{case_id}.onnx"
    onnx.save(built.model, str(path))
    expected = EXPECTED.get(case_id)
    try:
        model = load_onnx(path)
        y = ReferenceBackend().run(model, built.feed)
    except (ModelError, InputError) as e:
        message = str(e)
        assert "\n" not in message, message
        assert expected is not None, f"refused, but not listed in REFUSED: {message}"
        why, pattern = expected
        assert re.fullmatch(_pattern(pattern, case, path), message), \
            f"refused ({why}) with another message: {message}"
        return
    assert expected is None, f"listed as refused ({expected[0]}), but it loads and runs"

    ort = ort_session(path).run(None, {built.input_name: built.feed})[0]
    assert ort.shape == y.shape and ort.dtype == y.dtype
    if ort.dtype.kind == "f":
        diff = np.abs(ort.astype(np.float64) - y.astype(np.float64)) / model.output.scale
    else:
        diff = np.abs(_int8_domain(ort) - _int8_domain(y))
    assert diff.max(initial=0) <= 1 + 1e-6, \
        f"{diff.max():.3g} LSB from onnxruntime ({np.mean(diff > 1):.1%} of the outputs above 1 LSB)"

    if case.is_float and name not in LOSSY:   # the wrapped model still computes the case
        real = (_int8_domain(ort) - model.output.zero_point) * model.output.scale
        err = np.abs(real - case.outputs[0]) / model.output.scale
        assert err.max(initial=0) <= FIDELITY_LSB, \
            f"onnxruntime is {err.max():.3g} LSB from the case's expected output"


# -- focused tests of the importer fixes the cases exposed ------------------------

def _qdq_reshape_model(batch, target):
    """x (batch, 3, 4) -> Q -> DQ -> Reshape(target) -> Q: the int8 graph output."""
    from onnx import TensorProto, helper, numpy_helper
    inits = [numpy_helper.from_array(np.float32(0.05), "s"), numpy_helper.from_array(np.int8(0), "z"),
             numpy_helper.from_array(np.asarray(target, np.int64), "shape")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xf"]),
             helper.make_node("Reshape", ["xf", "shape"], ["yf"], name="reshape"),
             helper.make_node("QuantizeLinear", ["yf", "s", "z"], ["y"])]
    graph = helper.make_graph(
        nodes, "reshape", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, ["d0", "d1"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_reshape_may_state_a_fixed_batch_size(tmp_path):
    """An export without a dynamic batch axis writes its batch size into Reshape
    targets: that keeps the batch axis (test_reshape_reduced_dims and others)."""
    path = tmp_path / "fixed.onnx"
    onnx.save(_qdq_reshape_model(2, [2, 12]), str(path))
    model = load_onnx(path)
    assert model.output.shape == (12,)
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(2, 3, 4)
    ort = ort_session(path).run(None, {"x": x})[0]
    np.testing.assert_array_equal(ReferenceBackend().run(model, x), ort)


@pytest.mark.parametrize("batch,target", [("N", [2, 12]), (2, [4, 6]), (2, [3, 8])])
def test_reshape_changing_the_batch_axis_is_still_refused(tmp_path, batch, target):
    path = tmp_path / "changed.onnx"
    onnx.save(_qdq_reshape_model(batch, target), str(path))
    with pytest.raises(ModelError) as info:
        load_onnx(path)
    assert re.fullmatch(rf"node 'reshape' \(Reshape\): Reshape to \[{target[0]}, {target[1]}\] "
                        r"changes the batch axis", str(info.value))


def test_two_activation_inputs_are_still_a_file_error(tmp_path):
    """Only a graph input read as a scale, zero point, weights or bias names the
    node; two data inputs remain the file's problem."""
    from onnx import TensorProto, helper
    node = helper.make_node("Add", ["a", "b"], ["y"], name="add")
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in ("a", "b", "y")]
    path = tmp_path / "two.onnx"
    onnx.save(helper.make_model(helper.make_graph([node], "two", vi[:2], vi[2:]),
                                opset_imports=[helper.make_opsetid("", 13)]), str(path))
    with pytest.raises(ModelError) as info:
        load_onnx(path)
    assert str(info.value) == f"{path}: the graph has 2 inputs; fpgacnn supports exactly one"


# -- the list in docs/runtime.md ------------------------------------------------------

FORMS = {"": "QDQ int8", "uint8": "QDQ uint8", "qop": "QOperator int8",
         "qop_uint8": "QOperator uint8", "inputs": "scales as inputs"}


def _form(case, variant):
    return "as given" if variant == "" and not case.is_float else FORMS[variant]


def conformance_markdown():
    """The per-operator list of docs/runtime.md: the cases that run and match
    onnxruntime, and the refused ones with the reason (from :data:`REFUSED`)."""
    cases = C.harvest()
    by_op = {}
    for case_id in IDS:
        name, _, variant = case_id.partition("-")
        by_op.setdefault(cases[name].op, []).append((name, variant, case_id))
    rows = ["| Operator | Cases (test ids) | Run, within 1 LSB of onnxruntime | Refused: why (cases) |",
            "|---|---|---|---|"]
    for op, entries in by_op.items():
        names = list(dict.fromkeys(n for n, _, _ in entries))
        variants = {n: [v for m, v, _ in entries if m == n] for n in names}

        def label(name, vs):
            short = name.removeprefix("test_")
            if vs == variants[name]:
                return short
            return f"{short} ({', '.join(_form(cases[name], v) for v in vs)})"
        passed = {n: [v for m, v, i in entries if m == n and i not in EXPECTED] for n in names}
        reasons = {}
        for n, v, i in entries:
            if i in EXPECTED:
                reasons.setdefault(EXPECTED[i][0], {}).setdefault(n, []).append(v)
        forms = list(dict.fromkeys(_form(cases[n], v) for n, v, i in
                                   sorted(entries, key=lambda e: list(FORMS).index(e[1]))
                                   if i not in EXPECTED))
        ran = ", ".join(label(n, vs) for n, vs in passed.items() if vs) or "none"
        if forms:
            ran = f"{ran} [{', '.join(forms)}]"
        refused = "; ".join(f"{why}: {', '.join(label(n, vs) for n, vs in ns.items())}"
                            for why, ns in reasons.items()) or "none"
        rows.append(f"| {op} | {len(names)} ({len(entries)}) | {ran} | {refused} |")
    return "\n".join(rows)


def test_docs_list_is_current():
    """docs/runtime.md holds the list :func:`conformance_markdown` makes."""
    from pathlib import Path
    text = (Path(__file__).resolve().parent.parent / "docs" / "runtime.md").read_text()
    match = re.search(r"<!-- conformance:begin -->\n(.*?)\n<!-- conformance:end -->", text, re.S)
    assert match, "docs/runtime.md has no conformance list"
    assert match.group(1) == conformance_markdown()
