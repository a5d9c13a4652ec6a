"""Prefect tasks: thin wrappers over farm.stages. Prefect's own cache is off (NO_CACHE): each stage's
content-keyed cache lives in the lineage DB that every worker shares and is checked against the store
(farm/stages/common.py run_cached). A cache hit finishes the task in a state named "Cached", so the
Prefect UI shows which stages ran."""
