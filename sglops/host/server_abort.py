# Ask the restart running on this host to give up its start (another node of the same server failed): the
# restart's health wait reads the abort file, stops what it started and answers "aborted". The file names the
# start's token, so it never stops a later start; nothing else is touched (the restart holds the server lock).
import os

from .server_common import state_paths, write_atomic


def main(args):
    paths = state_paths(args["root"], create=False)
    if not os.path.isdir(os.path.dirname(paths["server.abort"])):
        return {"asked": False}
    write_atomic(paths["server.abort"], str(args["token"]) + "\n")
    return {"asked": True}
