/* file-read / file-write subcommands of dsec-native (native/host/files.c). */
#ifndef DSEC_NATIVE_FILES_H
#define DSEC_NATIVE_FILES_H

int file_read(int argc, char **argv);
int file_write(int argc, char **argv);

#endif
