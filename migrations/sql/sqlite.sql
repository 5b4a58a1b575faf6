-- leasehold lease table for SQLite (same schema the migrations create: steps 1 and 2).
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
    lease_value    VARCHAR(1024) NULL,
    gmt_create     BIGINT       NOT NULL,
    gmt_modified   BIGINT       NOT NULL,
    CONSTRAINT uk_lease_info_ns_name UNIQUE (namespace, lease_name)
);
-- The token floor (migration step 2): one row, the largest token any purge removed; a row
-- inserted later starts above it, so purging never makes an old token look new.
CREATE TABLE IF NOT EXISTS lease_info_floor (
    id      INTEGER NOT NULL PRIMARY KEY,
    version BIGINT  NOT NULL
);
INSERT INTO lease_info_floor (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;
-- Upgrading a table made by step 1 (leasehold 0.1): keep the CREATE TABLE of the floor and its
-- INSERT above, and add the column:
--   ALTER TABLE lease_info ADD COLUMN lease_value VARCHAR(1024) NULL;
-- Down (step 2): DROP TABLE IF EXISTS lease_info_floor; ALTER TABLE lease_info DROP COLUMN lease_value;
-- Down (step 1): DROP TABLE IF EXISTS lease_info;
