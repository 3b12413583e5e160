"""The data side: pretraining text, TFRecords and tf.data readers. Never imports a model."""
