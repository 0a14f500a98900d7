"""Running untrusted programs (nsjail, docker, local backends); see ARCHITECTURE.md. Built in a later issue."""
