"""The data side: pretraining text, TFRecords and tf.data readers, and the same features as
NumPy arrays for machines without TensorFlow (`arrays`). Never imports a model."""
