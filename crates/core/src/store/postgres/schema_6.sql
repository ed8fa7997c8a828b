-- Snodo task store, schema version 6: stored bytes beside the live and stored counts (a cap
-- on what a tenant's task records and journals hold). Each task counts what its record
-- says it counts (`storedBytes` in its body), which tasks written before this version do
-- not say: they count nothing until their next change of status or journal entry, so the
-- sums start at zero and stay the exact sum of what the tasks say.
ALTER TABLE live ADD COLUMN bytes bigint NOT NULL DEFAULT 0;
