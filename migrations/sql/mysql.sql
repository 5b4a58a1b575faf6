-- leasehold lease table for MariaDB 10.5+ / MySQL 8 (same schema the migration creates).
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
    gmt_create     BIGINT       NOT NULL,
    gmt_modified   BIGINT       NOT NULL,
    UNIQUE KEY uk_lease_info_ns_name (namespace, lease_name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_nopad_bin;
-- Down: DROP TABLE IF EXISTS lease_info;
