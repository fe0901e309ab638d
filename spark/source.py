"""``MagnetarDataSource``: the ``magnetar`` format of Spark's Python Data Source API.

Owns: the format name, the source schema, and the factory methods Spark calls at planning
time (``reader``, ``streamReader``, ``writer``, ``streamWriter``). Options are parsed and
checked here, so a bad option fails the query before any task runs; exactly-once writes to a
``topic`` option turn on that topic's deduplication here too (``__topic`` column targets are
checked by the first task that writes to them).

Must not know: how messages are read or sent.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource

from magnetar.spark.options import OptionError, read_options, write_options


class MagnetarDataSource(DataSource):  # type: ignore[misc]
    """``spark.read.format("magnetar")`` and friends; see docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        return "magnetar"

    def schema(self) -> str:
        from magnetar.spark.rows import SOURCE_DDL
        from magnetar.spark.typed import topic_schema

        typed = topic_schema(read_options(self.options, streaming=None))
        return SOURCE_DDL if typed is None else typed.ddl()

    def reader(self, schema: Any) -> Any:
        from magnetar.spark.read import BatchReader, FilteringBatchReader

        opts = read_options(self.options, streaming=False)
        # Spark refuses a reader with pushFilters while its filter pushdown conf is off, so
        # pushdown is a reader of its own, chosen by the filterPushdown option
        kind = FilteringBatchReader if opts.filter_pushdown else BatchReader
        return kind(opts, _typed_for(opts, schema))

    def streamReader(self, schema: Any) -> Any:
        from magnetar.spark.read import StreamReader

        opts = read_options(self.options, streaming=True)
        return StreamReader(opts, _typed_for(opts, schema))

    def _writer_parts(self, schema: Any, overwrite: bool) -> tuple[Any, Any]:
        from magnetar.spark import cluster
        from magnetar.spark.rows import SchemaError, sink_layout

        if overwrite:  # batch mode "overwrite" (a streaming "complete" query appends its table)
            raise OptionError(
                "save mode 'overwrite' is not supported: a topic is append-only; use mode 'append'"
            )
        opts = write_options(self.options)
        try:
            layout = sink_layout(schema, opts.topic)
        except SchemaError as exc:
            raise OptionError(str(exc)) from None
        if opts.exactly_once and opts.topic is not None:
            import asyncio

            async def parts() -> list[str]:
                client = cluster.open_client(opts.client)
                try:
                    return await client.get_topic_partitions(opts.topic or "")
                finally:
                    await client.close()

            assert opts.client.admin_url is not None
            cluster.ensure_deduplication(
                opts.client.admin_url, opts.topic, asyncio.run(parts()), settings=opts.client
            )
        return opts, layout

    def writer(self, schema: Any, overwrite: bool) -> Any:
        from magnetar.spark.write import BatchWriter

        return BatchWriter(*self._writer_parts(schema, overwrite))

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        from magnetar.spark.write import StreamWriter

        # outputMode("complete") arrives as overwrite: each micro-batch sends the whole result
        # table, as Kafka's sink does; readers take the latest message per key
        return StreamWriter(*self._writer_parts(schema, False))


def _typed_for(opts: Any, schema: Any) -> Any:
    """The ``TopicSchema`` a reader decodes with, when the planned columns are typed ones
    (anything but the raw ``value BINARY`` layout); it must still give those columns."""
    from magnetar.spark.typed import META_DDL, topic_schema

    names = [f.name for f in schema.fields]
    if "value" in names and type(schema["value"].dataType).__name__ == "BinaryType":
        return None
    typed = topic_schema(opts)
    meta = {part.split()[0] for part in META_DDL.split(", ")}
    planned = [n for n in names if n not in meta]
    if typed is None or [name for name, _ in typed.value_fields()] != planned:
        raise OptionError(
            "the topic's schema changed since the query was planned: plan the read again"
        )
    return typed


__all__ = ["MagnetarDataSource"]
