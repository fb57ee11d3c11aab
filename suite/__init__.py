"""suite: how much does a fine-tuned BERT-family encoder's score move with seeds and hyperparameters."""

__version__ = "0.1.0"
