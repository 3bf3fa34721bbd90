-- The sweep counts, every 30 s, the specs undelivered for longer than a threshold (the undelivered gauge). Its
-- filter on updated_at could only scan the whole table (75-125 ms at 150,000 resources, on every server);
-- this index holds the undelivered specs by age, so the count reads those over the threshold alone. A status
-- write that delivers a spec leaves no entry here, and the predicate's columns already kept status writes from
-- being HOT updates (resources_undelivered_idx), so only spec writes pay for it.
CREATE INDEX resources_undelivered_age_idx ON resources (updated_at)
    WHERE status_version IS NULL OR status_version <> version;
