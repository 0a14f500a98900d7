"""`tool.orders`: customer service in a seeded shop, with a scripted customer and replay grading.

`database` builds the shop, `tools` runs the reads and writes against its policies, `user` is the scripted
customer, `tasks` makes the tasks (references with gold writes and facts), `scoring` replays a transcript and
grades it, and `environment` is the tool environment, registered (with the replay verifier `tool.orders`) when
that module is imported. Importing this package registers nothing.
"""
