-- leasehold lease table for MariaDB 10.5+ / MySQL 8 (same schema the migrations create: steps 1 and 2).
-- The collation must be binary and NO PAD, or "Job"/"job" and "job"/"job " become one lease:
-- MariaDB: utf8mb4_nopad_bin (below); MySQL 8: replace it with utf8mb4_0900_bin.
-- Times are BIGINT milliseconds since the Unix epoch, computed by the database clock.
CREATE TABLE IF NOT EXISTS lease_info (
    id             BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    namespace      VARCHAR(128) NOT NULL DEFAULT '',
    lease_name     VARCHAR(255) NOT NULL,
    holder         VARCHAR(255) NOT NULL,
    lease_end_time BIGINT       NOT NULL,
    status         SMALLINT     NOT NULL,
    version        BIGINT       NOT NULL,
    lease_value    VARCHAR(1024) NULL,
    gmt_create     BIGINT       NOT NULL,
    gmt_modified   BIGINT       NOT NULL,
    UNIQUE KEY uk_lease_info_ns_name (namespace, lease_name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;
-- The token floor (migration step 2): one row, the largest token any purge removed; a row
-- inserted later starts above it, so purging never makes an old token look new.
CREATE TABLE IF NOT EXISTS lease_info_floor (
    id      INT    NOT NULL PRIMARY KEY,
    version BIGINT NOT NULL
) ENGINE = InnoDB;
INSERT IGNORE INTO lease_info_floor (id, version) VALUES (1, 0);
-- Upgrading a table made by step 1 (leasehold 0.1): keep the CREATE TABLE of the floor and its
-- INSERT above, and add the column:
--   ALTER TABLE lease_info ADD COLUMN lease_value VARCHAR(1024) NULL;
-- Down (step 2): DROP TABLE IF EXISTS lease_info_floor; ALTER TABLE lease_info DROP COLUMN lease_value;
-- Down (step 1): DROP TABLE IF EXISTS lease_info;
