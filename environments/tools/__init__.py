"""Tool environments: multi-turn tasks where the model calls tools and is graded on its final answer.

`base` is the contract every environment keeps; `proctor.environments.tools.math_python` and the other
environments implement it; sessions (`proctor.environments.tools.sessions`) drive them. Importing this package
registers nothing.
"""
