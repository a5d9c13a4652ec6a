"""The farm's operations side, apart from the pipeline it runs: Prefect's set-up for a process
(bootstrap), the embedded default's local Prefect server (server) and the app it serves
(prefect_app), the terminal and the log (console), and a CLI run recorded as a flow run (run_record).
The only modules of the library that import Prefect's server side or write to the terminal."""
