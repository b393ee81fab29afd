"""Sources other than folders and label files: WebDataset shards."""
