"""The offline demo behind `make demo`: timm classifiers compete on the UCI handwritten digits."""
