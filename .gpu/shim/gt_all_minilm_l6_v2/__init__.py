import os


def get_model_path():
    return os.environ['SUITE_GPU_MINILM']
