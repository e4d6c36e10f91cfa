"""A Spark Connect endpoint whose streaming queries run on statestream (``statestream
connect-server``): Connect clients run their jobs unchanged, batch work goes to Spark, streaming
queries to statestream.

==================  ===============================================================
``endpoint``        :class:`ConnectEndpoint`: the driver, Spark's Connect server and the
                    endpoint in front of it
``service``         the gRPC service: everything forwarded, streaming commands taken
``client_streams``  one client session's statestream queries and their commands
``plan_reader``     a client's streaming plan rebuilt as statestream DataFrame calls
==================  ===============================================================
"""

from statestream.connect.endpoint import DEFAULT_PORT, ConnectEndpoint

__all__ = ["ConnectEndpoint", "DEFAULT_PORT"]
