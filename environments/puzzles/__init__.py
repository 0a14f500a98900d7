"""Procedural puzzle families; each registers the verifier `puzzle.<family>` and an environment."""
