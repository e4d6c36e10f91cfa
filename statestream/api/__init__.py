"""The public API PySpark users touch: ``StreamingSession`` and ``enable`` (``session``), the
streaming reader, DataFrame and writer (``reader``, ``dataframe``, ``writer``), queries and their
manager (``query``), ``ss.read`` (``batch_reader``), ``ss.checkpointManager``
(``checkpoint_manager``), ``AggregateFunction`` (``aggregate_function``), and the hand-over of a
refused query to Spark's engine (``handover``). PySpark-shaped; everything below it (plan,
runtime, operators, state, checkpoint, sources, sinks, tools) is the engine. Nothing is imported
here: ``statestream``'s front door names what users import, and importing one of these modules
imports only what that module needs.
"""
