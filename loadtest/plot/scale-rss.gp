# loadtest/plot/scale-rss.gp - scale: the router's RSS against the number
# of live sandboxes while they are created, one line per report, with the
# 512 MiB target and the RSS once all were terminated.
#
#   gnuplot -c scale-rss.gp VARS TERMINAL
#
# VARS is the scale-rss.vars.gp written by extract.py (out_png, subtitle,
# xdiv, scale_* arrays of n reports; each data file holds the samples in
# index 0 and the after-terminate RSS in index 1); TERMINAL pngcairo or png.
load ARG1
set terminal @ARG2 size 1000,650 noenhanced font ',10'
set output out_png
set title "scale: router RSS while creating sandboxes (sampled every 5% of SCALE_N, and 1 s after the last)\n".subtitle
set grid
set key top left Left reverse opaque box
set xlabel xlabel_text
set ylabel 'router RSS (MiB)'
set xrange [0:*]
set yrange [0:y_top]
plot for [i=1:n] scale_dat[i] index 0 using ($1/xdiv):2 with linespoints lw 2 pt 7 ps 0.6 lc i \
       title scale_title[i], \
     for [i=1:n] scale_dat[i] index 1 using ($1/xdiv):2 with points pt 9 ps 2 lc i \
       title sprintf('after terminating all of them: %.0f MiB (0 live)', scale_after[i]), \
     target_mib with lines dt 2 lw 2 lc 'red' title target_title
