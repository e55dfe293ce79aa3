-- settle writes how each of its jobs ended, in the transaction that decided it (a job that
-- settled its event has its queue row deleted there). Finished rows left by earlier versions
-- (apalis marked them 'Done'; a pruning loop deleted them): nothing reads them.
DELETE FROM Jobs WHERE job_type = 'settle::PostSettlement' AND status = 'Done';
