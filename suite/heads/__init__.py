"""Task heads as LightningModules over any Hugging Face encoder."""
