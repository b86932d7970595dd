"""Training of the learned drafters: data (self-distillation from the target), the loop, model cards."""
