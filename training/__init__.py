"""calbench's training add-on: LoRA adapters that make a model a calibrated sampler.

``calbench train --method soft|hard --model MODEL --output DIR`` (or
``python -m calbench.training ...``); see ``training.config.TrainConfig`` for options.
"""
