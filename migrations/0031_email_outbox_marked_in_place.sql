-- Marking an email sent (or skipped, or failed) writes a new version of its
-- row. Two things kept that from being a heap-only (HOT) update, which
-- writes no index entry and a fraction of the WAL: email_outbox_unsent_idx
-- names the status (and no query reads it: emails are found by id, by
-- payment, and by kind and object), and full pages left no room for the
-- row's new version beside the old one. An email is written once and
-- marked about once, so half of each page is left free for that: emails
-- written after this migration are marked in place.
DROP INDEX email_outbox_unsent_idx;
ALTER TABLE email_outbox SET (fillfactor = 50);
