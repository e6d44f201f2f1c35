-- Tenax schema, version 4: dead jobs by queue, so that the metrics count them without reading
-- every finished job kept for retention (completed ones are most of them). Only a death
-- writes to this index.
CREATE INDEX tenax_finished_dead ON tenax_finished (queue) WHERE status = 4;
