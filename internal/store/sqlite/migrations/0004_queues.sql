-- Message queues with SQS's semantics. A queue exists as soon as a message
-- names it. Times here are Unix nanoseconds: the receive path compares and
-- sorts them on every call, and integers are cheaper than text.
CREATE TABLE queue_messages (
    -- The send sequence: the tie-break after visible_at, and the message id.
    -- AUTOINCREMENT so that an id is never reused after a delete.
    seq        INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    queue      TEXT    NOT NULL,
    body       BLOB    NOT NULL,
    sent_at    INTEGER NOT NULL,
    visible_at INTEGER NOT NULL,
    receives   INTEGER NOT NULL DEFAULT 0,
    -- The random part of the current receipt; '' until first received.
    receipt    TEXT    NOT NULL DEFAULT ''
) STRICT;

-- Receive order, and the earliest visible_at a long poll waits for.
CREATE INDEX queue_messages_visible ON queue_messages (queue, visible_at, seq);

-- Deduplication ids seen per queue, with when the first of them was sent;
-- rows older than the window are purged by later sends.
CREATE TABLE queue_dedup (
    queue    TEXT    NOT NULL,
    dedup_id TEXT    NOT NULL,
    sent_at  INTEGER NOT NULL,
    PRIMARY KEY (queue, dedup_id)
) STRICT, WITHOUT ROWID;

CREATE INDEX queue_dedup_sent ON queue_dedup (sent_at);
