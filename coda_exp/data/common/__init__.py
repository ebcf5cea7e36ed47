"""What every data family shares: errors, file reading, split names, vocabulary, tokenizers, vectors, batching."""
