"""The one bridge to the JVM: finding a Java runtime for the embedded local Spark (``java``) and
Py4J calls to static members without name lookups, Scala sequences read as lists and
``clone_session`` (``calls``). Private; nothing is imported here (``java`` needs no Py4J).
"""
