"""Stage 3, model: encoders (aliases, local folders, hub ids; weights read from disk per trial),
optimizers, the stabiliser recipes, fine-tuning methods from the user's own code (the interface,
their code's hash, their pre-flight), dev-set metrics and where trials run (CPU or a GPU). Takes a
model name and hyperparameters; gives an encoder ready to fine-tune and the numbers that score it."""
