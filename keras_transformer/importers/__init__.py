"""Pretrained models from other toolkits as model directories: Marian / OPUS-MT (`marian`) and Hugging
Face's `MarianMTModel` (`huggingface`), through one vocabulary and weight writer (`common`)."""
