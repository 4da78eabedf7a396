"""Where a transformers model keeps its decoder layers, and the class that
loads a checkpoint (for tests/make_golden.py and tests/gpu_vs_transformers.py).

A causal LM keeps its layers in model.model.layers; a multimodal wrapper
(Gemma3ForConditionalGeneration, Mistral3ForConditionalGeneration,
Qwen3VLForConditionalGeneration) in model.model.language_model.layers, and
runs its language model alone on text."""


def decoder_layers(model):
    inner = model.model
    return getattr(inner, "language_model", inner).layers


def is_wrapper(cfg):
    """A multimodal config: its language model in text_config."""
    return getattr(cfg, "text_config", None) is not None and \
        getattr(cfg, "vision_config", None) is not None


def model_class(tf, cfg):
    """The class transformers builds cfg's model with: the wrapper's own
    ForConditionalGeneration class (AutoModelForCausalLM maps Gemma 3's
    alone), else AutoModelForCausalLM."""
    if is_wrapper(cfg):
        return getattr(tf, type(cfg).__name__.replace("Config", "ForConditionalGeneration"))
    return tf.AutoModelForCausalLM


def from_config(tf, cfg, **kwargs):
    """A random-weight model of cfg."""
    if is_wrapper(cfg):
        return model_class(tf, cfg)._from_config(cfg, **kwargs)
    return tf.AutoModelForCausalLM.from_config(cfg, **kwargs)
