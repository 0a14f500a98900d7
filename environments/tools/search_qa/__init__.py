"""`tool.search_qa`: multi-hop questions over a seeded fictional encyclopedia, answered with BM25 search.

`corpus` generates the encyclopedia, `index` searches it, `questions` draws the multi-hop questions, `scoring`
reads and grades the final answer, and `environment` is the tool environment, registered (with the replay
verifier `tool.search_qa`) when that module is imported. Importing this package registers nothing.
"""
