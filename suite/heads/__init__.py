"""Stage 4, heads: the LightningModules over any Hugging Face encoder (sequence classification,
token tagging, span extraction) and the registry that prepares a task for its head. Takes
features and an encoder; gives a module to train and its dev predictions."""
