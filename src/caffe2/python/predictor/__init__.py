"""Caffe2's predictor export: a model saved as one database (its nets and parameters) and loaded back for inference."""
