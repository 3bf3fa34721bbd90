-- Specs and statuses are JSON of a few kilobytes, written on every change: lz4 compresses them at a
-- fraction of pglz's CPU (statuses are the server's hot path), for slightly larger values. Servers built
-- without lz4 (or before PostgreSQL 14) keep the default.
DO $$
BEGIN
    EXECUTE 'ALTER TABLE resources ALTER COLUMN status SET COMPRESSION lz4, ALTER COLUMN spec SET COMPRESSION lz4';
EXCEPTION WHEN feature_not_supported OR syntax_error OR invalid_parameter_value THEN
    RAISE NOTICE 'lz4 compression is not available; specs and statuses keep the default compression';
END
$$;
