"""Small helpers shared across tfdet that import neither TensorFlow nor the rest of tfdet."""
