"""SSH into pods, served by skiff itself (asyncssh): no SSH daemon in any pod.

``host_key.py`` keeps the server's host key; ``doors.py`` says who a connection is (a pod's
owner, by one of the public keys of their settings); ``channels.py`` carries one SSH session
(a shell, a command, ``sftp``/``scp``/``rsync``) to and from a process in the pod;
``server.py`` listens on the SSH port and on each running pod's own port.
"""
