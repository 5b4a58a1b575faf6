-- leasehold lease table for SQLite (same schema the migration creates).
-- Run with journal_mode=WAL (leasehold's connection builder sets it, with a busy timeout).
-- Times are INTEGER milliseconds since the Unix epoch, computed by the database clock.
CREATE TABLE IF NOT EXISTS lease_info (
    id             INTEGER      NOT NULL PRIMARY KEY AUTOINCREMENT,
    namespace      VARCHAR(128) NOT NULL DEFAULT '',
    lease_name     VARCHAR(255) NOT NULL,
    holder         VARCHAR(255) NOT NULL,
    lease_end_time BIGINT       NOT NULL,
    status         SMALLINT     NOT NULL,
    version        BIGINT       NOT NULL,
    gmt_create     BIGINT       NOT NULL,
    gmt_modified   BIGINT       NOT NULL,
    CONSTRAINT uk_lease_info_ns_name UNIQUE (namespace, lease_name)
);
-- Down: DROP TABLE IF EXISTS lease_info;
