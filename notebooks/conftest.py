"""``pytest --nbval notebooks/``: each tutorial's kernel is told it runs a notebook, as JupyterLab tells it (and as
``refresh.py`` did when it stored the outputs), so ``%dag history`` lists this notebook's runs there too.
"""

import os

os.environ.setdefault("JPY_SESSION_NAME", "tutorial.ipynb")
