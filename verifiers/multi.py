"""`multi`: a weighted sum or a formula over other verifiers' rewards (format + answer + length shaping)."""
