"""Publishing a model where users download it: the repository folder (folder.py) and its text files
(repo_files.py), and the Hugging Face upload (hub.py)."""
