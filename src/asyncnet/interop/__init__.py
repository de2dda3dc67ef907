"""Bridges to other frameworks: PyTorch, TensorFlow, ONNX."""
