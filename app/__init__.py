"""The kbert playground: a Gradio app over the checkpoints in saved_models/.

    python -m app [--model CKPT ...] [--host 127.0.0.1] [--port 7860]

It uses only kbert's public API (`kbert.load` and the returned object's methods), and imports
kbert (Keras, TensorFlow) only when a model is first loaded.
"""
