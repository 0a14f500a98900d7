"""Tool-call verifier (`toolcall`): function calls against gold calls, schema-aware; the module `verifier`
registers it when imported."""
