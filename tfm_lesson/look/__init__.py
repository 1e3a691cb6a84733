"""Looking at a model: static figures (``viz``), interactive explorers (``widgets``), attention recorded from a forward
pass (``recording``), what the heads learned (``interpret``), peak memory (``memory``), activations along depth
(``depth``), a shape tracer (``shapes``) and chapter 03's toy heads (``toy_heads``). Nothing here changes a model.
"""
