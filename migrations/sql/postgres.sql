-- leasehold lease table for PostgreSQL (same schema the migrations create: steps 1, 2 and 4).
-- Times are BIGINT milliseconds since the Unix epoch, computed by the database clock.
-- Rename lease_info to PREFIXlease_info if you use a table prefix.
CREATE TABLE IF NOT EXISTS lease_info (
    id             BIGSERIAL    PRIMARY KEY,
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
-- Room for renewals (migration step 4): half of each page stays free, so a renewal is a
-- heap-only update (same page, no index entry). Applies to pages written after it; run
-- VACUUM FULL lease_info once to apply it to a table that already has rows.
ALTER TABLE lease_info SET (fillfactor = 50);
-- Upgrading a table made by step 1 (leasehold 0.1): keep the CREATE TABLE of the floor and its
-- INSERT above, and add the column:
--   ALTER TABLE lease_info ADD COLUMN lease_value VARCHAR(1024) NULL;
-- Down (step 4): ALTER TABLE lease_info RESET (fillfactor);
-- Down (step 2): DROP TABLE IF EXISTS lease_info_floor; ALTER TABLE lease_info DROP COLUMN lease_value;
-- Down (step 1): DROP TABLE IF EXISTS lease_info;
