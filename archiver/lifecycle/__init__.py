"""The archive's own lifecycle (docs/lifecycle.md): retention (`purge`), erasure on
request (`erase`), access tiers and rehydration (`tiers`), write-once protection.

Purge and erase take rows out of the archive as a restore's move back does, through the
ledger (archiver.ledger): files retired and rewritten in one catalog transaction, with a
ledger row saying who asked what; the Delta table follows in its next publication; the
blobs go last. A file under an immutability policy or a legal hold is never touched."""
