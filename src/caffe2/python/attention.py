"""Caffe2's ``attention``: the attention steps of ``rnn_cell.AttentionCell`` (Bahdanau-style
"regular" attention, "recurrent" attention that also sees the previous context, and "dot"
attention), built from Caffe2 ops into a decoder's step net.

Shapes, as in Caffe2: ``encoder_outputs_transposed`` ``[N, E, T_enc]``,
``weighted_encoder_outputs`` ``[T_enc, N, E]``, the decoder state ``[1, N, H]``; each function
returns the context ``[1, N, E]``, the attention weights ``[N, T_enc, 1]`` and the blobs
worth recomputing on the backward pass. ``encoder_lengths`` masks encoder positions past each
sequence's end (``SequenceMask``) before the softmax.

    >>> AttentionType.Regular, AttentionType.Dot
    (0, 2)
"""

from __future__ import annotations

from typing import Any

from caffe2.python import brew

__all__ = [
    "AttentionType",
    "apply_dot_attention",
    "apply_recurrent_attention",
    "apply_regular_attention",
    "apply_soft_coverage_attention",
    "s",
]


class AttentionType:
    Regular, Recurrent, Dot, SoftCoverage = tuple(range(4))


def s(scope: Any, name: str) -> str:
    """``<scope>/<name>`` (attention scopes its blobs by hand, as Caffe2 did)."""
    return f"{scope}/{name}"


def _calc_weighted_context(
    model: Any, encoder_outputs_transposed: Any, encoder_output_dim: int, attention_weights_3d: Any, scope: Any
) -> Any:
    """c = sum_j w_j s_j: [N, E, T_enc] x [N, T_enc, 1] -> [1, N, E]."""
    context = brew.batch_mat_mul(
        model, [encoder_outputs_transposed, attention_weights_3d], s(scope, "attention_weighted_encoder_context")
    )
    context, _ = model.net.Reshape(
        context,
        [context, s(scope, "attention_weighted_encoder_context_old_shape")],
        shape=[1, -1, encoder_output_dim],
    )
    return context


def _calc_attention_weights(model: Any, logits_transposed: Any, scope: Any, encoder_lengths: Any = None) -> Any:
    """Softmax over the encoder positions of [N, T_enc, 1] logits (masked past ``encoder_lengths``)."""
    if encoder_lengths is not None:
        logits_transposed = model.net.SequenceMask(
            [logits_transposed, encoder_lengths], ["masked_attention_logits"], mode="sequence"
        )
    return brew.softmax(model, logits_transposed, s(scope, "attention_weights_3d"), engine="CUDNN", axis=1)


def _calc_attention_logits_from_sum_match(model: Any, hidden_outputs_sum: Any, encoder_output_dim: int, scope: Any):
    """e_j = v^T tanh(sum_j): [T_enc, N, E] -> logits [N, T_enc, 1]."""
    hidden_outputs_sum = model.net.Tanh(hidden_outputs_sum, hidden_outputs_sum)
    logits = brew.fc(
        model,
        hidden_outputs_sum,
        s(scope, "attention_logits"),
        dim_in=encoder_output_dim,
        dim_out=1,
        axis=2,
        freeze_bias=True,
    )
    return brew.transpose(model, logits, s(scope, "attention_logits_transposed"), axes=[1, 0, 2])


def _apply_fc_weight_for_sum_match(model: Any, input: Any, dim_in: int, dim_out: int, scope: Any, name: str) -> Any:
    """W x for the sum match: [1, N, dim_in] -> [N, dim_out]."""
    output = brew.fc(model, input, s(scope, name), dim_in=dim_in, dim_out=dim_out, axis=2)
    return model.net.Squeeze(output, output, dims=[0])


def apply_recurrent_attention(
    model: Any,
    encoder_output_dim: int,
    encoder_outputs_transposed: Any,
    weighted_encoder_outputs: Any,
    decoder_hidden_state_t: Any,
    decoder_hidden_state_dim: int,
    attention_weighted_encoder_context_t_prev: Any,
    scope: Any,
    encoder_lengths: Any = None,
) -> tuple[Any, Any, list[Any]]:
    """Attention whose match also sees the previous context (arXiv:1601.03317, section 4.1)."""
    weighted_prev = _apply_fc_weight_for_sum_match(
        model,
        attention_weighted_encoder_context_t_prev,
        encoder_output_dim,
        encoder_output_dim,
        scope,
        "weighted_prev_attention_context",
    )
    weighted_hidden = _apply_fc_weight_for_sum_match(
        model,
        decoder_hidden_state_t,
        decoder_hidden_state_dim,
        encoder_output_dim,
        scope,
        "weighted_decoder_hidden_state",
    )
    tmp = model.net.Add([weighted_prev, weighted_hidden], s(scope, "decoder_hidden_encoder_outputs_sum_tmp"))
    total = model.net.Add([weighted_encoder_outputs, tmp], s(scope, "decoder_hidden_encoder_outputs_sum"), broadcast=1)
    return _finish_sum_match(model, total, encoder_outputs_transposed, encoder_output_dim, scope, encoder_lengths)


def apply_regular_attention(
    model: Any,
    encoder_output_dim: int,
    encoder_outputs_transposed: Any,
    weighted_encoder_outputs: Any,
    decoder_hidden_state_t: Any,
    decoder_hidden_state_dim: int,
    scope: Any,
    encoder_lengths: Any = None,
) -> tuple[Any, Any, list[Any]]:
    """Bahdanau attention: e_j = v^T tanh(W s_j + U h)."""
    weighted_hidden = _apply_fc_weight_for_sum_match(
        model,
        decoder_hidden_state_t,
        decoder_hidden_state_dim,
        encoder_output_dim,
        scope,
        "weighted_decoder_hidden_state",
    )
    total = model.net.Add(
        [weighted_encoder_outputs, weighted_hidden],
        s(scope, "decoder_hidden_encoder_outputs_sum"),
        broadcast=1,
        use_grad_hack=1,
    )
    return _finish_sum_match(model, total, encoder_outputs_transposed, encoder_output_dim, scope, encoder_lengths)


def _finish_sum_match(
    model: Any, total: Any, encoder_outputs_transposed: Any, encoder_output_dim: int, scope: Any, encoder_lengths: Any
) -> tuple[Any, Any, list[Any]]:
    logits = _calc_attention_logits_from_sum_match(model, total, encoder_output_dim, scope)
    weights = _calc_attention_weights(model, logits, scope, encoder_lengths)
    context = _calc_weighted_context(model, encoder_outputs_transposed, encoder_output_dim, weights, scope)
    return context, weights, [total]


def apply_dot_attention(
    model: Any,
    encoder_output_dim: int,
    encoder_outputs_transposed: Any,
    decoder_hidden_state_t: Any,
    decoder_hidden_state_dim: int,
    scope: Any,
    encoder_lengths: Any = None,
) -> tuple[Any, Any, list[Any]]:
    """Luong's dot attention: e_j = s_j . (W h) (W only when the sizes differ)."""
    if decoder_hidden_state_dim != encoder_output_dim:
        weighted = brew.fc(
            model,
            decoder_hidden_state_t,
            s(scope, "weighted_decoder_hidden_state"),
            dim_in=decoder_hidden_state_dim,
            dim_out=encoder_output_dim,
            axis=2,
        )
    else:
        weighted = decoder_hidden_state_t
    squeezed = model.net.Squeeze(weighted, s(scope, "squeezed_weighted_decoder_hidden_state"), dims=[0])
    expanded = model.net.ExpandDims(squeezed, squeezed, dims=[2])
    logits = model.net.BatchMatMul([encoder_outputs_transposed, expanded], s(scope, "attention_logits"), trans_a=1)
    weights = _calc_attention_weights(model, logits, scope, encoder_lengths)
    context = _calc_weighted_context(model, encoder_outputs_transposed, encoder_output_dim, weights, scope)
    return context, weights, []


def apply_soft_coverage_attention(*args: Any, **kwargs: Any) -> Any:
    """Soft-coverage attention is not provided."""
    raise NotImplementedError("apply_soft_coverage_attention: AttentionType.SoftCoverage is not supported")
