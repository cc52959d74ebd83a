"""The bottom layer: how a message looks as bytes.

Everything that reads or writes a commit-log record goes through this package:
both write doors, replication, recovery, dispatch, fetch, ``skiff store check``
and the clients' decoder. It imports nothing else of Skiff's but ``error_text``
(an import-linter contract checks that), so the store, the servers and the
clients can all depend on it.

    record_layout    field offsets, header structs, magic numbers, SYSFLAG bits
    hosts            BORNHOST / STOREHOST fields
    properties       the PROPERTIES field and the property names the store reads
    property_names   every property name the broker sets or reserves, system topics
    tag_expression   tag filter expressions (``*``, ``A || B``)
    record_check     the one validator (a record, or a run of them)
    record_codec     the encoder and the decoder
    compressed_body  bodies flagged compressed, inflated within a limit
"""
