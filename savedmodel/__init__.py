"""SavedModel export with TF Serving signatures, and a client for TF Serving's APIs."""
