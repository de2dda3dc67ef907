"""Caffe2's ResNet-50 builder (``caffe2.python.models.resnet``), with brew.

Blob and parameter names are Caffe2's (``conv1``, ``comp_<k>_conv_<i>``, ``comp_<k>_spatbn_<i>``,
``shortcut_projection_<k>``, ``last_out_L<labels>``), so model files and scripts that name
them keep working::

    >>> from caffe2.python import model_helper
    >>> from caffe2.python.models import resnet
    >>> m = model_helper.ModelHelper(name="resnet_doc")
    >>> str(resnet.create_resnet50(m, "data", num_input_channels=3, num_labels=10, no_loss=True))
    'last_out_L10'
    >>> len([op for op in m.net.Proto().op if op.type == "Conv"])
    53
"""

from __future__ import annotations

from typing import Any

from caffe2.python import brew

__all__ = ["ResNetBuilder", "create_resnet50"]


class ResNetBuilder:
    """Adds bottleneck blocks one after another, numbering components as Caffe2 did."""

    def __init__(
        self,
        model: Any,
        prev_blob: Any,
        no_bias: Any,
        is_test: bool,
        bn_epsilon: float = 1e-5,
        bn_momentum: float = 0.9,
    ):
        self.model = model
        self.comp_count = 0
        self.comp_idx = 0
        self.prev_blob = prev_blob
        self.is_test = is_test
        self.bn_epsilon = bn_epsilon
        self.bn_momentum = bn_momentum
        self.no_bias = 1 if no_bias else 0

    def add_conv(self, in_filters: int, out_filters: int, kernel: int, stride: int = 1, pad: int = 0) -> Any:
        self.comp_idx += 1
        self.prev_blob = brew.conv(
            self.model,
            self.prev_blob,
            f"comp_{self.comp_count}_conv_{self.comp_idx}",
            in_filters,
            out_filters,
            weight_init=("MSRAFill", {}),
            kernel=kernel,
            stride=stride,
            pad=pad,
            no_bias=self.no_bias,
        )
        return self.prev_blob

    def add_relu(self) -> Any:
        self.prev_blob = brew.relu(self.model, self.prev_blob, self.prev_blob)
        return self.prev_blob

    def add_spatial_bn(self, num_filters: int) -> Any:
        self.prev_blob = brew.spatial_bn(
            self.model,
            self.prev_blob,
            f"comp_{self.comp_count}_spatbn_{self.comp_idx}",
            num_filters,
            epsilon=self.bn_epsilon,
            momentum=self.bn_momentum,
            is_test=self.is_test,
        )
        return self.prev_blob

    def add_bottleneck(
        self,
        input_filters: int,
        base_filters: int,
        output_filters: int,
        down_sampling: bool = False,
        spatial_batch_norm: bool = True,
    ) -> None:
        """1x1 -> 3x3 (stride 2 when down-sampling) -> 1x1 convolutions, plus the shortcut (projected when wider)."""
        self.comp_idx = 0
        shortcut = self.prev_blob
        stride = 2 if down_sampling else 1
        self.add_conv(input_filters, base_filters, kernel=1, stride=1)
        if spatial_batch_norm:
            self.add_spatial_bn(base_filters)
        self.add_relu()
        self.add_conv(base_filters, base_filters, kernel=3, stride=stride, pad=1)
        if spatial_batch_norm:
            self.add_spatial_bn(base_filters)
        self.add_relu()
        last = self.add_conv(base_filters, output_filters, kernel=1)
        if spatial_batch_norm:
            last = self.add_spatial_bn(output_filters)
        if output_filters > input_filters:
            shortcut = brew.conv(
                self.model,
                shortcut,
                f"shortcut_projection_{self.comp_count}",
                input_filters,
                output_filters,
                weight_init=("MSRAFill", {}),
                kernel=1,
                stride=stride,
                no_bias=self.no_bias,
            )
            if spatial_batch_norm:
                shortcut = brew.spatial_bn(
                    self.model,
                    shortcut,
                    f"shortcut_projection_{self.comp_count}_spatbn",
                    output_filters,
                    epsilon=self.bn_epsilon,
                    momentum=self.bn_momentum,
                    is_test=self.is_test,
                )
        self.prev_blob = brew.sum(self.model, [shortcut, last], f"comp_{self.comp_count}_sum_{self.comp_idx}")
        self.comp_idx += 1
        self.add_relu()
        self.comp_count += 1


def create_resnet50(
    model: Any,
    data: Any,
    num_input_channels: int,
    num_labels: int,
    label: Any = None,
    is_test: bool = False,
    no_loss: bool = False,
    no_bias: Any = 0,
    conv1_kernel: int = 7,
    conv1_stride: int = 2,
    final_avg_kernel: int = 7,
    bn_epsilon: float = 1e-5,
    bn_momentum: float = 0.9,
) -> Any:
    """ResNet-50 (He et al. 2015, table 1): returns the logits (``no_loss``), (softmax, loss) with a
    ``label``, or the softmax."""
    brew.conv(
        model,
        data,
        "conv1",
        num_input_channels,
        64,
        weight_init=("MSRAFill", {}),
        kernel=conv1_kernel,
        stride=conv1_stride,
        pad=3,
        no_bias=no_bias,
    )
    brew.spatial_bn(model, "conv1", "conv1_spatbn_relu", 64, epsilon=bn_epsilon, momentum=bn_momentum, is_test=is_test)
    brew.relu(model, "conv1_spatbn_relu", "conv1_spatbn_relu")
    brew.max_pool(model, "conv1_spatbn_relu", "pool1", kernel=3, stride=2)
    b = ResNetBuilder(model, "pool1", no_bias=no_bias, is_test=is_test, bn_epsilon=bn_epsilon, bn_momentum=bn_momentum)
    for i, (cin, base, cout, n) in enumerate(
        ((64, 64, 256, 3), (256, 128, 512, 4), (512, 256, 1024, 6), (1024, 512, 2048, 3))
    ):
        b.add_bottleneck(cin, base, cout, down_sampling=i > 0)
        for _ in range(1, n):
            b.add_bottleneck(cout, base, cout)
    final_avg = brew.average_pool(
        model, b.prev_blob, "final_avg", kernel=final_avg_kernel, stride=1, global_pooling=True
    )
    last_out = brew.fc(model, final_avg, f"last_out_L{num_labels}", 2048, num_labels)
    if no_loss:
        return last_out
    if label is not None:
        return model.SoftmaxWithLoss([last_out, label], ["softmax", "loss"])
    return brew.softmax(model, last_out, "softmax")
